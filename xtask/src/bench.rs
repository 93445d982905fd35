//! `cargo xtask bench`: benchmark sweeps whose reports land in `target/bench/`.
//!
//! `cargo xtask bench write-amp [--quick] [--driver graph|saver] [--full-max-turns N]` builds
//! the `antler` CLI in release mode once, runs `antler bench write-amp --json` for every
//! configuration of `shared/bench/write-amp.md` (every saver available: PostgreSQL only when
//! `DATABASE_URL` is set), and writes `target/bench/write-amp.jsonl` (one JSON object per
//! configuration) and `target/bench/write-amp.md` (the table).
//!
//! The default driver runs the workload's graph through the runtime; `--driver saver` feeds
//! the saver the workload's checkpoint/write sequence directly (see the CLI's help).
//! With the saver driver, full mode stores the whole message list as one JSON value at every
//! checkpoint, so its storage grows with T²: at T = 2000 that is about 2 GB per saver, and
//! that driver runs full mode only up to `--full-max-turns` (default 1000; 2000 for the
//! graph driver, whose full-mode lists reference message bodies stored once). The snapshot
//! frequency does not apply to full mode, which runs once per T. The plot (`write-amp.svg`:
//! amplification against T, log scale, one line per saver/mode/F) is a small SVG drawn by
//! hand: a plotting dependency would cost more build time than it is worth here.
//!
//! `cargo xtask bench flatness [--runs N]` checks the flatness target of the graph workload
//! (delta mode, F = 10): per saver, N runs at T = 100 and N at T = 2000, interleaved so that
//! both see the same phase of the machine, and the ratio of the medians of the last-10 invoke
//! means (target: at most 1.5). A single run's last-10 mean is a mean of ten invokes of a
//! tenth of a millisecond on the memory saver, which this machine's noise moves by more than
//! half; the medians over runs are the figure. It writes `target/bench/flatness.md` and
//! `flatness.jsonl`.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::Value;

/// Dispatches `cargo xtask bench <name>`.
/// Refuses any argument but `switches` and `options` (each followed by its value): a typo
/// such as `--quik` would otherwise run the whole sweep.
fn check_args(args: &[String], switches: &[&str], options: &[&str]) -> anyhow::Result<()> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if switches.contains(&a.as_str()) {
            continue;
        }
        if options.contains(&a.as_str()) {
            if it.next().is_none() {
                bail!("{a} needs a value");
            }
            continue;
        }
        bail!("unknown argument `{a}`");
    }
    Ok(())
}

pub(crate) fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    match args.first().map(String::as_str) {
        Some("write-amp") => {
            check_args(&args[1..], &["--quick"], &["--driver", "--full-max-turns"])?;
            write_amp(root, &args[1..])
        }
        Some("flatness") => {
            check_args(&args[1..], &[], &["--runs"])?;
            flatness(root, &args[1..])
        }
        Some(name) => bail!("unknown benchmark `{name}`; available: write-amp, flatness"),
        None => bail!(
            "usage: cargo xtask bench write-amp [--quick] [--driver graph|saver] [--full-max-turns N]\n       cargo xtask bench flatness [--runs N]"
        ),
    }
}

/// Builds the `antler` CLI in release mode and returns its path and the report directory.
///
/// Both come from cargo itself (the build's artifact message, `cargo metadata`), so a target
/// directory set anywhere cargo reads one (`CARGO_TARGET_DIR`, a config file's
/// `build.target-dir`) is the one used: guessing `target/` would run a stale binary.
fn build_cli(root: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    println!("==> building the antler CLI (release)");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(&cargo)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "antler-cli",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(root)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo build")?;
    if !output.status.success() {
        bail!("building antler-cli failed ({})", output.status);
    }
    let exe = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "antler")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .context("cargo build reported no `antler` executable")?;
    let metadata = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !metadata.status.success() {
        bail!("cargo metadata failed ({})", metadata.status);
    }
    let metadata: Value =
        serde_json::from_slice(&metadata.stdout).context("reading cargo metadata's output")?;
    let target = metadata["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .context("cargo metadata gave no target directory")?;
    let out_dir = target.join("bench");
    fs::create_dir_all(&out_dir)?;
    Ok((exe, out_dir))
}

/// Runs `antler <args>` (ending in `--json`) and parses the JSON object on its last line.
fn run_cli(exe: &Path, root: &Path, args: &[String]) -> anyhow::Result<Value> {
    println!("==> antler {}", args.join(" "));
    let output = Command::new(exe)
        .args(args)
        .current_dir(root)
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    if !output.status.success() {
        bail!(
            "antler {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let stdout = String::from_utf8(output.stdout)?;
    let line = stdout.lines().last().context("the CLI printed nothing")?;
    serde_json::from_str(line).with_context(|| format!("parsing {line}"))
}

/// The savers to run: memory and SQLite, and PostgreSQL when `DATABASE_URL` is set.
fn available_savers() -> Vec<&'static str> {
    let mut savers = vec!["memory", "sqlite"];
    if std::env::var("DATABASE_URL").is_ok_and(|u| !u.is_empty()) {
        savers.push("postgres");
    } else {
        println!("bench: DATABASE_URL is unset, skipping the postgres saver");
    }
    savers
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The flatness check (see the module docs).
fn flatness(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let runs: usize = match args.iter().position(|a| a == "--runs") {
        Some(i) => args.get(i + 1).context("--runs needs a value")?.parse()?,
        None => 5,
    };
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    let savers = available_savers();
    let (exe, out_dir) = build_cli(root)?;
    let started = Instant::now();
    let mut jsonl = String::new();
    let mut table = String::from(
        "| saver | last-10 mean at T = 100, ms (runs) | at T = 2000, ms (runs) | median T = 100 | median T = 2000 | ratio of medians | within 1.5 |\n|---|---|---|---|---|---|---|\n",
    );
    let mut all_within = true;
    for saver in savers {
        let (mut short, mut long) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            for (turns, into) in [(100u32, &mut short), (2000u32, &mut long)] {
                let args: Vec<String> = [
                    "bench",
                    "write-amp",
                    "--saver",
                    saver,
                    "--mode",
                    "delta",
                    "--snapshot-frequency",
                    "10",
                    "--turns",
                    &turns.to_string(),
                    "--json",
                ]
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
                let value = run_cli(&exe, root, &args)?;
                let last10 = num(&value, "invoke_ms_last10_mean");
                println!("    invoke last-10 mean {last10:.3} ms");
                jsonl.push_str(&format!("{value}\n"));
                into.push(last10);
            }
        }
        let (m_short, m_long) = (median(&short), median(&long));
        let ratio = m_long / m_short;
        let within = ratio <= 1.5;
        all_within &= within;
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            table,
            "| {saver} | {} | {} | {m_short:.3} | {m_long:.3} | {ratio:.2} | {} |",
            list(&short),
            list(&long),
            if within { "yes" } else { "no" }
        );
    }
    let _ = writeln!(
        table,
        "\nDelta mode, F = 10, graph driver; {runs} runs per T, interleaved; {:.0} s.",
        started.elapsed().as_secs_f64()
    );
    fs::write(out_dir.join("flatness.jsonl"), jsonl)?;
    fs::write(out_dir.join("flatness.md"), &table)?;
    println!("{table}");
    if !all_within {
        bail!("invoke latency is not flat in T on every saver (see the table)");
    }
    Ok(())
}

struct Config {
    saver: &'static str,
    mode: &'static str,
    frequency: u32,
    turns: u32,
}

fn write_amp(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let driver = match args.iter().position(|a| a == "--driver") {
        Some(i) => match args.get(i + 1).map(String::as_str) {
            Some(d @ ("graph" | "saver")) => d,
            other => bail!("--driver must be graph or saver, not {other:?}"),
        },
        None => "graph",
    };
    let full_max_turns: u32 = match args.iter().position(|a| a == "--full-max-turns") {
        Some(i) => args
            .get(i + 1)
            .context("--full-max-turns needs a value")?
            .parse()?,
        None if driver == "graph" => 2000,
        None => 1000,
    };
    let savers = available_savers();
    let (turns, frequencies): (&[u32], &[u32]) = if quick {
        (&[100, 500], &[10])
    } else {
        (&[100, 500, 1000, 2000], &[10, 50, 1000])
    };
    let mut configs = Vec::new();
    for &saver in &savers {
        for &t in turns {
            for &f in frequencies {
                configs.push(Config {
                    saver,
                    mode: "delta",
                    frequency: f,
                    turns: t,
                });
            }
            if t <= full_max_turns && (!quick || t == 100) {
                configs.push(Config {
                    saver,
                    mode: "full",
                    frequency: 10,
                    turns: t,
                });
            }
        }
    }

    let (exe, out_dir) = build_cli(root)?;

    let started = Instant::now();
    let mut rows = Vec::new();
    for c in &configs {
        let args = [
            "bench".to_owned(),
            "write-amp".to_owned(),
            "--saver".to_owned(),
            c.saver.to_owned(),
            "--mode".to_owned(),
            c.mode.to_owned(),
            "--snapshot-frequency".to_owned(),
            c.frequency.to_string(),
            "--turns".to_owned(),
            c.turns.to_string(),
            "--driver".to_owned(),
            driver.to_owned(),
            "--json".to_owned(),
        ];
        let value = run_cli(&exe, root, &args)?;
        println!(
            "    persisted {} B, amplification {:.3}, invoke p50 {:.3} ms, get_state cold {:.2} ms",
            value["persisted_bytes"],
            value["amplification"].as_f64().unwrap_or(0.0),
            value["invoke_ms_p50"].as_f64().unwrap_or(0.0),
            value["get_state_ms_cold"].as_f64().unwrap_or(0.0)
        );
        rows.push(value);
    }
    let elapsed = started.elapsed().as_secs_f64();

    let jsonl: String = rows.iter().map(|r| format!("{r}\n")).collect();
    fs::write(out_dir.join("write-amp.jsonl"), jsonl)?;
    let table = markdown(&rows, quick, driver, full_max_turns, elapsed);
    fs::write(out_dir.join("write-amp.md"), &table)?;
    fs::write(out_dir.join("write-amp.svg"), plot_svg(&rows))?;
    println!("{table}");
    println!(
        "bench: wrote {} and {}",
        out_dir.join("write-amp.jsonl").display(),
        out_dir.join("write-amp.md").display()
    );
    Ok(())
}

fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(f64::NAN)
}

fn markdown(
    rows: &[Value],
    quick: bool,
    driver: &str,
    full_max_turns: u32,
    elapsed: f64,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# write-amp {}\n",
        if quick { "(quick)" } else { "sweep" }
    );
    let driver_text = if driver == "graph" {
        "the workload's graph run by the runtime (`--driver graph`)"
    } else {
        "the saver directly, with the workload's checkpoint/write sequence (`--driver saver`, no runtime)"
    };
    let _ = writeln!(
        s,
        "Driver: {driver_text}.\n\
         Bytes are uncompressed payload bytes (keys and row overhead excluded); amplification = persisted / new message bytes; \"stored B\" is the physical size beside them (SQLite: the file after `VACUUM`; PostgreSQL: `pg_column_size` of the thread's rows).\n\
         Full mode runs up to T = {full_max_turns}; F does not apply to it. Runs took {elapsed:.1} s.\n"
    );
    s.push_str("| saver | mode | F | T | persisted B | new data B | amp | stored B | B/turn (last 10) | invoke ms mean | p50 | p99 | last10 | get_state warm ms | cold ms median (min–p90) | cold ms, max replay | body scan cold ms | cold peak B | max replayed | cold invoke ms | history page ms | fork ms |\n");
    s.push_str(
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.3} | {} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r["saver"].as_str().unwrap_or("?"),
            r["mode"].as_str().unwrap_or("?"),
            if r["mode"] == "full" {
                "–".to_owned()
            } else {
                r["snapshot_frequency"].to_string()
            },
            r["turns"],
            r["persisted_bytes"],
            r["new_data_bytes"],
            num(r, "amplification"),
            stored_bytes(r),
            num(r, "bytes_per_turn_mean"),
            num(r, "invoke_ms_mean"),
            num(r, "invoke_ms_p50"),
            num(r, "invoke_ms_p99"),
            num(r, "invoke_ms_last10_mean"),
            num(r, "get_state_ms_warm"),
            cold_spread(r),
            opt_ms(r, "get_state_ms_cold_max_replay"),
            opt_ms(r, "bodies_scan_ms_cold"),
            r["get_state_peak_bytes"],
            r["max_replayed_writes"],
            opt_ms(r, "invoke_ms_cold"),
            opt_ms(r, "history_page10_ms_cold"),
            opt_ms(r, "fork_ms_cold"),
        );
    }
    s
}

/// The cold `get_state` median with the spread of its reads, `median (min–p90)`; the median
/// alone for results written before the spread was recorded.
fn cold_spread(r: &Value) -> String {
    let median = num(r, "get_state_ms_cold");
    match (
        r["get_state_ms_cold_min"].as_f64(),
        r["get_state_ms_cold_p90"].as_f64(),
    ) {
        (Some(min), Some(p90)) => format!("{median:.2} ({min:.2}–{p90:.2})"),
        _ => format!("{median:.2}"),
    }
}

/// A latency not every run reports (the graph driver's cold-process costs, the database
/// savers' body scan): two decimals or `–`.
/// The physical size of a result's store (SQLite file after `VACUUM`, PostgreSQL
/// `pg_column_size`), `–` where there is none (the memory saver).
fn stored_bytes(r: &Value) -> String {
    ["sqlite_file_bytes_after_vacuum", "pg_column_size_bytes"]
        .iter()
        .find_map(|k| r[*k].as_u64())
        .map_or_else(|| "–".to_owned(), |b| b.to_string())
}

fn opt_ms(r: &Value, key: &str) -> String {
    r[key]
        .as_f64()
        .map_or_else(|| "–".to_owned(), |v| format!("{v:.2}"))
}

/// Amplification against T on a log scale, one polyline per (saver, mode, F).
fn plot_svg(rows: &[Value]) -> String {
    let (w, h, left, bottom, top, right) = (760.0, 420.0, 70.0, 50.0, 20.0, 230.0);
    let mut series: std::collections::BTreeMap<String, Vec<(f64, f64)>> =
        std::collections::BTreeMap::new();
    for r in rows {
        let key = format!(
            "{} {}{}",
            r["saver"].as_str().unwrap_or("?"),
            r["mode"].as_str().unwrap_or("?"),
            if r["mode"] == "delta" {
                format!(" F={}", r["snapshot_frequency"])
            } else {
                String::new()
            }
        );
        series
            .entry(key)
            .or_default()
            .push((num(r, "turns"), num(r, "amplification")));
    }
    let max_t = rows.iter().map(|r| num(r, "turns")).fold(1.0, f64::max);
    let max_a = rows
        .iter()
        .map(|r| num(r, "amplification"))
        .fold(2.0, f64::max);
    let (lo, hi) = (0.0_f64, max_a.log10().ceil().max(1.0));
    let x = |t: f64| left + (w - left - right) * t / max_t;
    let y = |a: f64| top + (h - top - bottom) * (1.0 - (a.max(1.0).log10() - lo) / (hi - lo));
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    svg.push_str(&format!(r#"<rect width="{w}" height="{h}" fill="white"/>"#));
    for e in 0..=(hi as i32) {
        let yy = y(10f64.powi(e));
        svg.push_str(&format!(r##"<line x1="{left}" x2="{}" y1="{yy}" y2="{yy}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##, w - right, left - 6.0, yy + 4.0, 10f64.powi(e)));
    }
    svg.push_str(&format!(
        r#"<text x="{}" y="{}" text-anchor="middle">turns T</text>"#,
        (left + w - right) / 2.0,
        h - 12.0
    ));
    svg.push_str(&format!(r#"<text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">amplification (log)</text>"#, h / 2.0, h / 2.0));
    let colors = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
        "#bcbd22", "#17becf", "#393b79", "#637939",
    ];
    for (i, (name, mut points)) in series.into_iter().enumerate() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = colors[i % colors.len()];
        let path: Vec<String> = points
            .iter()
            .map(|(t, a)| format!("{:.1},{:.1}", x(*t), y(*a)))
            .collect();
        svg.push_str(&format!(
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#,
            path.join(" ")
        ));
        let ly = top + 14.0 * i as f64;
        svg.push_str(&format!(r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{name}</text>"#, w - right + 10.0, w - right + 30.0, w - right + 35.0, ly + 4.0));
    }
    for t in [100.0, 500.0, 1000.0, 2000.0]
        .into_iter()
        .filter(|t| *t <= max_t)
    {
        svg.push_str(&format!(
            r#"<text x="{}" y="{}" text-anchor="middle">{t}</text>"#,
            x(t),
            h - bottom + 16.0
        ));
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// Every row of the table has as many cells as the header, and the stored size comes from
    /// the saver's own key (`–` for the memory saver).
    #[test]
    fn the_table_shows_the_stored_size_in_its_column() {
        let row = |saver: &str, key: Option<&str>| {
            let mut r = json!({
                "saver": saver, "mode": "delta", "snapshot_frequency": 10, "turns": 100,
                "persisted_bytes": 1, "new_data_bytes": 1, "amplification": 1.0,
                "bytes_per_turn_mean": 1.0, "invoke_ms_mean": 1.0, "invoke_ms_p50": 1.0,
                "invoke_ms_p99": 1.0, "invoke_ms_last10_mean": 1.0, "get_state_ms_warm": 1.0,
                "get_state_ms_cold": 1.0, "get_state_peak_bytes": 1, "max_replayed_writes": 1,
            });
            if let Some(k) = key {
                r[k] = json!(4242);
            }
            r
        };
        let md = super::markdown(
            &[
                row("memory", None),
                row("sqlite", Some("sqlite_file_bytes_after_vacuum")),
                row("postgres", Some("pg_column_size_bytes")),
            ],
            true,
            "graph",
            2000,
            1.0,
        );
        let lines: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        let cells = |l: &str| l.matches('|').count();
        let header = lines.first().copied().unwrap_or_default();
        let column = header
            .split('|')
            .position(|c| c.trim() == "stored B")
            .expect("a stored B column");
        assert!(lines.iter().all(|l| cells(l) == cells(header)), "{md}");
        let stored: Vec<&str> = lines[2..]
            .iter()
            .map(|l| l.split('|').nth(column).unwrap_or_default().trim())
            .collect();
        assert_eq!(stored, ["–", "4242", "4242"]);
    }
}
