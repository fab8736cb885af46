//! Tests across OS processes. The test binary (`harness = false`, its own
//! `main`) starts itself as its children: a child finds its role in the
//! environment ([`role`]) and talks to the parent in lines on its stdin and
//! stdout; without a role, `main` runs the tests ([`run_tests`]).

use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::pin::Pin;
use std::process::{Child, ChildStdout, Command, ExitCode, Stdio};
use std::time::Duration;

use tollgate_core::{Limit, Limiter};

/// The variable that gives a child its role.
const ROLE: &str = "TOLLGATE_CHILD_ROLE";

/// The role this process was started in; `None` in the parent.
pub fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// A test of a multi-process binary, given the binary's shared context
/// (its private server, say).
pub type Test<C> = for<'a> fn(&'a C) -> Pin<Box<dyn Future<Output = ()> + 'a>>;

/// Runs `tests` one after the other on `runtime`, printing a line each and
/// a summary as the test harness does; failure when one failed.
pub fn run_tests<C>(
    runtime: &tokio::runtime::Runtime,
    context: &C,
    tests: &[(&str, Test<C>)],
) -> ExitCode {
    let mut failed = 0;
    println!("\nrunning {} tests", tests.len());
    for (name, test) in tests {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            runtime.block_on(test(context))
        }));
        println!(
            "test {name} ... {}",
            if result.is_ok() { "ok" } else { "FAILED" }
        );
        failed += usize::from(result.is_err());
    }
    println!("\n{} passed, {failed} failed\n", tests.len() - failed);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(101)
    }
}

/// Ends this child after `lifetime`, so that it never outlives a stuck
/// parent by long: the parent then sees its output end and fails instead
/// of hanging.
pub fn exit_after(lifetime: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(lifetime);
        std::process::exit(2);
    });
}

/// A child process: this test binary in a role. Killed when dropped, so
/// that a failed test leaves no child running.
pub struct ChildProcess {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl ChildProcess {
    /// Starts this test binary in `role`, with the variables `env`.
    ///
    /// # Panics
    ///
    /// When it cannot be started.
    pub fn spawn(role: &str, env: &[(&str, &str)]) -> ChildProcess {
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("no test binary: {e}"));
        let mut child = Command::new(exe)
            .env(ROLE, role)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start a child: {e}"));
        let out = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("a child without its stdout"));
        ChildProcess {
            child,
            out: BufReader::new(out),
        }
    }

    /// What follows `prefix` in the next line of the child's output that
    /// holds it.
    ///
    /// # Panics
    ///
    /// When the output ends first.
    pub fn line_after(&mut self, prefix: &str) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let read = self
                .out
                .read_line(&mut line)
                .unwrap_or_else(|e| panic!("cannot read the child's output: {e}"));
            assert_ne!(read, 0, "the child ended before printing {prefix}");
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..].trim().to_owned();
            }
        }
    }

    /// The whole lines the child wrote that it has not read yet, up to the
    /// end of its output (a line cut short by a kill is left out).
    ///
    /// # Panics
    ///
    /// When the output cannot be read (it is not UTF-8, say).
    pub fn rest(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        let mut line = String::new();
        let mut read = |line: &mut String| {
            self.out
                .read_line(line)
                .unwrap_or_else(|e| panic!("cannot read the child's output: {e}"))
        };
        while read(&mut line) > 0 {
            if line.ends_with('\n') {
                lines.push(line.trim_end().to_owned());
            }
            line.clear();
        }
        lines
    }

    /// Writes `line` to the child's stdin.
    ///
    /// # Panics
    ///
    /// When the child's stdin is closed.
    pub fn say(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut();
        let written = stdin.map(|stdin| writeln!(stdin, "{line}"));
        assert!(
            matches!(written, Some(Ok(()))),
            "cannot tell the child {line}"
        );
    }

    /// Kills the child (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the child; whether it exited successfully.
    pub fn succeeded(&mut self) -> bool {
        self.child.wait().is_ok_and(|status| status.success())
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A racer's part: says `READY`, waits for `GO` on stdin, runs `tasks`
/// tasks of `rounds` checks of `limit` each (reservations or counts), and
/// prints `ALLOWED <n>`.
///
/// # Panics
///
/// When a check fails.
pub async fn race(limiter: &Limiter, limit: &Limit, tasks: u64, rounds: u64, reserve: bool) {
    println!("READY");
    let mut go = String::new();
    let read = std::io::stdin().read_line(&mut go);
    assert!(
        read.as_ref().is_ok_and(|&n| n > 0),
        "no GO from the parent: {read:?}"
    );
    let tasks: Vec<_> = (0..tasks)
        .map(|_| {
            let (limiter, limits) = (limiter.clone(), [limit.clone()]);
            tokio::spawn(async move {
                let mut allowed = 0;
                for _ in 0..rounds {
                    let verdict = if reserve {
                        limiter.reserve(&limits).await
                    } else {
                        limiter.count(&limits).await
                    };
                    let verdict = verdict.unwrap_or_else(|e| panic!("a check failed: {e}"));
                    allowed += u64::from(verdict.is_allowed());
                }
                allowed
            })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        allowed += task.await.unwrap_or_else(|e| panic!("a racer failed: {e}"));
    }
    println!("ALLOWED {allowed}");
}

/// The parent's part of a race: starts `racers` (children in [`race`])
/// together once all are ready; how many checks each allowed.
///
/// # Panics
///
/// When a racer fails.
pub fn race_children(mut racers: Vec<ChildProcess>) -> Vec<u64> {
    for racer in &mut racers {
        racer.line_after("READY");
    }
    for racer in &mut racers {
        racer.say("GO");
    }
    racers
        .iter_mut()
        .map(|racer| {
            let text = racer.line_after("ALLOWED");
            let allowed = text
                .parse()
                .unwrap_or_else(|e| panic!("ALLOWED {text}: {e}"));
            assert!(racer.succeeded(), "a racer failed");
            allowed
        })
        .collect()
}
