//! [`Logs`]: what a future logged, for tests of logging policies.

use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing::instrument::WithSubscriber;

/// Log lines written while a future runs, without ANSI colours.
#[derive(Clone, Debug, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Runs `future`, keeping what it logs at WARN and above.
    pub async fn capture<F: std::future::Future>(&self, future: F) -> F::Output {
        self.capture_from(tracing::Level::WARN, future).await
    }

    /// Runs `future`, keeping what it logs at `level` and above.
    pub async fn capture_from<F: std::future::Future>(
        &self,
        level: tracing::Level,
        future: F,
    ) -> F::Output {
        future.with_subscriber(self.subscriber(level)).await
    }

    /// Runs `f` on this thread, keeping what it logs at `level` and above
    /// (for code that logs outside any future, such as a worker thread's).
    pub fn capture_blocking<T>(&self, level: tracing::Level, f: impl FnOnce() -> T) -> T {
        tracing::subscriber::with_default(self.subscriber(level), f)
    }

    /// A subscriber writing into these logs at `level` and above.
    fn subscriber(&self, level: tracing::Level) -> impl tracing::Subscriber + Send + Sync {
        interested_everywhere();
        let logs = self.clone();
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(level)
            .with_writer(move || logs.clone())
            .finish()
    }

    /// What was logged.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

/// Makes every callsite stay of interest, once per process: a global
/// default that takes every event (and does nothing with it), unless the
/// binary set its own. Without one, a callsite first reached by a test that
/// captures nothing, while another test's capturing subscriber is being
/// registered, can be cached as of no interest, and a later capture then
/// misses its events (tracing-core's interest cache races with scoped
/// subscribers).
fn interested_everywhere() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
    });
}
