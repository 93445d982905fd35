//! `cargo xtask tidy`: rules the compiler does not check.
//!
//! - Layering: every workspace dependency edge (normal, build or dev) must be
//!   allowed by the table in `docs/ARCHITECTURE.md` (between the
//!   `layering:start` / `layering:end` markers), read against `cargo metadata`.
//!   The table is the single source: changing the layering means editing that
//!   document, which is how an architecture change gets reviewed.
//! - Every Rust file under `crates/*/src` starts with a `//!` module doc, and
//!   every `lib.rs` sets `#![warn(missing_docs)]`.
//! - No `dbg!`, `todo!` or `unimplemented!` in crate sources.
//! - Every package is named `antler` or `antler-*` and inherits the workspace lints.
//! - Unsafe code (denied by the workspace lints) is allowed only in the files of
//!   [`UNSAFE_ALLOWED`]; every `.rs` file under `crates/` is checked.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::Value;

/// The only crate sources that may allow `unsafe_code`, each with why.
const UNSAFE_ALLOWED: &[(&str, &str)] = &[(
    "crates/cli/src/alloc.rs",
    "the CLI sets glibc's malloc thresholds through `mallopt`",
)];

/// Runs all tidy checks and reports every violation, not just the first.
pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let mut problems = Vec::new();
    let allowed = layering_table(root)?;
    check_layering(root, &allowed, &mut problems)?;
    check_sources(root, &mut problems)?;
    check_unsafe(root, &mut problems)?;
    if problems.is_empty() {
        println!("tidy: ok");
        return Ok(());
    }
    for p in &problems {
        eprintln!("tidy: {p}");
    }
    bail!("tidy found {} problem(s)", problems.len())
}

/// Parses `| package | dep, dep |` rows between the layering markers.
fn layering_table(root: &Path) -> anyhow::Result<BTreeMap<String, BTreeSet<String>>> {
    let path = root.join("docs/ARCHITECTURE.md");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let start = text
        .find("<!-- layering:start -->")
        .context("docs/ARCHITECTURE.md has no <!-- layering:start --> marker")?;
    let end = text
        .find("<!-- layering:end -->")
        .context("docs/ARCHITECTURE.md has no <!-- layering:end --> marker")?;
    let mut table = BTreeMap::new();
    for line in text[start..end].lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // A row is `| a | b | c |`: empty first and last cells.
        if cells.len() < 4 || !cells[1].starts_with('`') {
            continue;
        }
        let package = cells[1].trim_matches('`').to_owned();
        let deps = cells[2]
            .split(',')
            .map(|d| d.trim().trim_matches('`'))
            .filter(|d| !d.is_empty() && *d != "—" && *d != "-")
            .map(str::to_owned)
            .collect();
        table.insert(package, deps);
    }
    if table.is_empty() {
        bail!("the layering table in docs/ARCHITECTURE.md has no rows");
    }
    Ok(table)
}

fn check_layering(
    root: &Path,
    allowed: &BTreeMap<String, BTreeSet<String>>,
    problems: &mut Vec<String>,
) -> anyhow::Result<()> {
    let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let meta: Value = serde_json::from_slice(&output.stdout).context("parsing cargo metadata")?;
    let packages = meta["packages"]
        .as_array()
        .context("metadata has no packages")?;
    let names: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    for package in packages {
        let name = package["name"].as_str().unwrap_or_default();
        if name != "xtask" && name != "antler" && !name.starts_with("antler-") {
            problems.push(format!(
                "package `{name}` must be named `antler` or `antler-*`"
            ));
        }
        let Some(allowed_deps) = allowed.get(name) else {
            problems.push(format!(
                "package `{name}` has no row in the layering table of docs/ARCHITECTURE.md"
            ));
            continue;
        };
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            let dep_name = dep["name"].as_str().unwrap_or_default();
            if names.contains(dep_name) && !allowed_deps.contains(dep_name) {
                problems.push(format!(
                    "`{name}` depends on `{dep_name}`, which the layering table does not allow"
                ));
            }
        }
        if let Some(manifest) = package["manifest_path"].as_str() {
            let text = fs::read_to_string(manifest).unwrap_or_default();
            if !text.contains("[lints]\nworkspace = true") {
                problems.push(format!("{manifest}: missing `[lints] workspace = true`"));
            }
        }
    }
    Ok(())
}

fn check_sources(root: &Path, problems: &mut Vec<String>) -> anyhow::Result<()> {
    let mut files = Vec::new();
    for entry in fs::read_dir(root.join("crates"))? {
        let src = entry?.path().join("src");
        if src.is_dir() {
            collect_rs(&src, &mut files)?;
        }
    }
    for file in files {
        let text = fs::read_to_string(&file)?;
        let rel = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        if !text.trim_start().starts_with("//!") {
            problems.push(format!("{rel}: must start with a `//!` module doc"));
        }
        if file.file_name().is_some_and(|n| n == "lib.rs")
            && !text.contains("#![warn(missing_docs)]")
        {
            problems.push(format!("{rel}: lib.rs must set #![warn(missing_docs)]"));
        }
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for banned in ["dbg!(", "todo!(", "unimplemented!("] {
                if code.contains(banned) {
                    problems.push(format!("{rel}:{}: `{banned}` in crate sources", i + 1));
                }
            }
        }
    }
    Ok(())
}

/// Every Rust file under `crates/` (sources, tests, benches, examples, build scripts) may
/// mention `unsafe_code` outside comments only to forbid or deny it, unless it is listed in
/// [`UNSAFE_ALLOWED`]. Any other mention is taken for an `allow` or `expect` of the lint,
/// however rustfmt splits the attribute over lines.
fn check_unsafe(root: &Path, problems: &mut Vec<String>) -> anyhow::Result<()> {
    let mut files = Vec::new();
    collect_rs(&root.join("crates"), &mut files)?;
    for file in files {
        let rel = file.strip_prefix(root).unwrap_or(&file);
        if UNSAFE_ALLOWED.iter().any(|(f, _)| rel == Path::new(f)) {
            continue;
        }
        let text = fs::read_to_string(&file)?;
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if code.contains("unsafe_code")
                && !code.contains("forbid(unsafe_code")
                && !code.contains("deny(unsafe_code")
            {
                problems.push(format!(
                    "{}:{}: unsafe code is allowed only in {:?} (xtask/src/tidy.rs)",
                    rel.display(),
                    i + 1,
                    UNSAFE_ALLOWED.iter().map(|(f, _)| *f).collect::<Vec<_>>()
                ));
            }
        }
    }
    Ok(())
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_rs(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}
