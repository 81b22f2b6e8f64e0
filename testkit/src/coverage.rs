//! What the test command counts, beside the tests' own results: the checks a test could not
//! run here, and the toolchains whose programs the tests ran. Both go to files the command
//! names in the environment (scripts/test.sh), because the harness hides a passing test's
//! output.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Says that a check could not run here, through the one channel the test command reads: a
/// line `TEST<tab>WHAT` appended to the file `$HEAPSNAP_NOT_COVERED_FILE` names (scripts/test.sh
/// sets it and lists every line as NOT COVERED; the harness hides a passing test's stderr, so
/// stderr alone would be lost). Under CI (`CI=true`) it also fails the test: a green CI run
/// must mean everything ran.
pub fn not_covered(what: &str) {
    // One line per notice, whatever `what` holds (a script's stderr may run over lines).
    let what = what.split_whitespace().collect::<Vec<_>>().join(" ");
    eprintln!("NOT COVERED: {what}");
    if let Some(file) = std::env::var_os("HEAPSNAP_NOT_COVERED_FILE") {
        append_line(Path::new(&file), &format!("{}\t{what}", running_test()));
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "NOT COVERED under CI=true: {what}");
}

/// The running test's name (the harness names each test's thread after it).
fn running_test() -> String {
    std::thread::current().name().unwrap_or("unnamed").to_string()
}

/// Notes that the running test uses a program built with `toolchain`, in
/// `$HEAPSNAP_TOOLCHAIN_COVERAGE/TOOLCHAIN` (one test name a line), so that the test command
/// can say how many tests each toolchain's lane covered.
pub fn record_toolchain_use(toolchain: &str) {
    let Some(dir) = std::env::var_os("HEAPSNAP_TOOLCHAIN_COVERAGE") else { return };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    append_line(&dir.join(toolchain), &running_test());
}

/// Appends `line` to `file`, in one short write to a file opened for appending, so that the
/// lines of tests running at once do not mix.
fn append_line(file: &Path, line: &str) {
    let written =
        std::fs::OpenOptions::new().create(true).append(true).open(file).and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
    written.unwrap_or_else(|e| panic!("append to {}: {e}", file.display()));
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    /// Run only by [`a_notice_reaches_the_file_and_fails_under_ci`], in a child process.
    #[test]
    #[ignore = "run by a_notice_reaches_the_file_and_fails_under_ci"]
    fn a_test_that_cannot_run_its_check() {
        super::not_covered("a check this machine cannot run,\n  said over two lines");
    }

    /// A passing test's notice reaches the file the test command reads (its stderr would be
    /// lost), one line naming the test; under CI the test fails, and its notice is written too.
    #[test]
    fn a_notice_reaches_the_file_and_fails_under_ci() {
        let file = std::env::temp_dir().join(format!("heapsnap-not-covered-{}", std::process::id()));
        let _ = std::fs::remove_file(&file);
        let run = |ci: &str| {
            Command::new(std::env::current_exe().expect("the test binary"))
                .args(["--exact", "coverage::tests::a_test_that_cannot_run_its_check", "--include-ignored"])
                .env("HEAPSNAP_NOT_COVERED_FILE", &file)
                .env("CI", ci)
                .output()
                .expect("run the test binary")
        };
        let passing = run("false");
        assert!(passing.status.success(), "{}", String::from_utf8_lossy(&passing.stdout));
        let under_ci = run("true");
        assert!(!under_ci.status.success(), "{}", String::from_utf8_lossy(&under_ci.stdout));
        let lines = std::fs::read_to_string(&file).expect("the notices");
        std::fs::remove_file(&file).expect("remove the notices");
        let line = "coverage::tests::a_test_that_cannot_run_its_check\ta check this machine cannot run, said over two lines\n";
        assert_eq!(lines, line.repeat(2));
    }
}
