//! How the `antler` process asks its memory allocator to keep freed memory.
//!
//! Reading a long thread allocates a few megabytes that live only for the read: the stored
//! message bodies as they arrive, then the decoded messages.
//! With its default settings, glibc's malloc hands the free memory at the top of a heap back
//! to the kernel once more than 128 KiB of it is free, and serves allocations of 128 KiB and
//! more with their own `mmap`, unmapped again on free (it raises both thresholds by itself
//! only after freeing such a mapping).
//! The next read then faults every page in afresh: at 4,000 messages (2.1 MB of bodies) that
//! cost 1–5 ms of a cold `get_state` on SQLite on the development machine (virtualised, where
//! a page fault is expensive): 6.9–9.4 ms with the settings below, 8.3–14.5 ms without.
//!
//! So the binary raises both thresholds once at start-up, before any thread exists: up to
//! [`TRIM_THRESHOLD`] bytes of free memory stay with each heap, and only allocations of at
//! least [`MMAP_THRESHOLD`] bytes get their own mapping.
//! The price is resident memory that is no longer returned: up to [`TRIM_THRESHOLD`] of free
//! memory at the top of each malloc arena (one per thread that allocates, up to eight per
//! core) stays with the process.
//! Programs that embed the library choose their own allocator; `docs/bench-write-amp.md`
//! ("Allocator") has the figures with and without these settings.
//!
//! Setting [`DEFAULTS_ENV`] to `1` keeps glibc's defaults, so both can be measured with one
//! binary; other C libraries, 32-bit targets and operating systems are left alone.

/// Free bytes a heap keeps before malloc returns memory from its top to the kernel.
#[cfg_attr(
    not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")),
    allow(dead_code, reason = "used on 64-bit glibc only")
)]
pub(crate) const TRIM_THRESHOLD: i32 = 64 << 20;

/// The smallest allocation malloc serves with a mapping of its own: the upper limit glibc
/// documents for 64-bit targets (`mallopt(3)`).
#[cfg_attr(
    not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")),
    allow(dead_code, reason = "used on 64-bit glibc only")
)]
pub(crate) const MMAP_THRESHOLD: i32 = 32 << 20;

/// Set to `1` to leave the allocator's settings as they are.
pub(crate) const DEFAULTS_ENV: &str = "ANTLER_MALLOC_DEFAULTS";

/// The allocator settings the process runs with, as the benchmark reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settings {
    /// glibc's malloc with [`TRIM_THRESHOLD`] and [`MMAP_THRESHOLD`].
    #[cfg_attr(
        not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")),
        allow(dead_code, reason = "used on 64-bit glibc only")
    )]
    KeepFreed,
    /// The allocator's own defaults: [`DEFAULTS_ENV`] was set, the C library is not glibc, or
    /// glibc refused a parameter.
    Defaults,
}

impl Settings {
    /// The name the benchmark's JSON carries under `allocator`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::KeepFreed => "glibc-keep-freed",
            Self::Defaults => "defaults",
        }
    }
}

/// Applies the settings of this module unless [`DEFAULTS_ENV`] is `1`; call it first in
/// `main`, while the process has one thread.
pub(crate) fn configure() -> Settings {
    if std::env::var(DEFAULTS_ENV).is_ok_and(|v| v == "1") {
        return Settings::Defaults;
    }
    keep_freed()
}

#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
#[allow(
    unsafe_code,
    reason = "mallopt is a C function; see the SAFETY comment"
)]
fn keep_freed() -> Settings {
    // SAFETY: `mallopt` takes two integers and only changes malloc's tuning parameters; it
    // touches no memory of ours. glibc documents it as MT-Unsafe (other arenas read the
    // parameters without its lock), so `configure` runs first in `main`, while the process
    // has one thread; the test calls it in a child process that runs only that test. It
    // returns 1 on success, 0 when glibc refuses the value (and leaves that parameter as it
    // was).
    let trim = unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) };
    // SAFETY: as above.
    let mmap = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) };
    if trim == 1 && mmap == 1 {
        Settings::KeepFreed
    } else {
        Settings::Defaults
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")))]
fn keep_freed() -> Settings {
    Settings::Defaults
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The process's resident memory, from `/proc/self/status`.
    #[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
    fn resident_bytes() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let kb = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap();
        kb * 1024
    }

    /// Set in the child process of [`freed_memory_stays_with_the_process`].
    #[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
    const CHILD_ENV: &str = "ANTLER_ALLOC_TEST_CHILD";

    /// What the settings are for: a buffer a read allocated and freed stays with the process.
    /// With glibc's defaults an allocation of 8 MiB gets a mapping of its own, unmapped on
    /// free, and the child fails. The child is a process of its own that runs only
    /// [`freed_memory_child`], so no other test's allocations move the resident set or glibc's
    /// self-adjusting thresholds, and `mallopt` runs with no other thread allocating.
    #[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
    #[test]
    fn freed_memory_stays_with_the_process() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "alloc::tests::freed_memory_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
        assert!(
            stdout.contains("1 passed"),
            "the child ran no test:\n{stdout}"
        );
    }

    /// The body of [`freed_memory_stays_with_the_process`]; does nothing unless run as its
    /// child.
    #[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
    #[test]
    fn freed_memory_child() {
        const MIB: u64 = 1 << 20;
        if std::env::var_os(CHILD_ENV).is_none() {
            return;
        }
        assert_eq!(keep_freed(), Settings::KeepFreed);
        let before = resident_bytes();
        // Every byte written, as a read writes the bodies it receives; `black_box` keeps the
        // optimiser from dropping the buffer.
        let buffer = std::hint::black_box(vec![7u8; 8 << 20].into_boxed_slice());
        let during = resident_bytes();
        assert!(
            during >= before + 6 * MIB,
            "the buffer was not resident: {before} -> {during} bytes ({})",
            buffer.len()
        );
        drop(buffer);
        let after = resident_bytes();
        assert!(
            after + 2 * MIB >= during,
            "malloc returned {} bytes of the 8 MiB freed to the kernel",
            during.saturating_sub(after)
        );
    }

    /// The settings' names are what `docs/bench-write-amp.md` documents.
    #[test]
    fn names_are_stable() {
        assert_eq!(Settings::KeepFreed.as_str(), "glibc-keep-freed");
        assert_eq!(Settings::Defaults.as_str(), "defaults");
    }
}
