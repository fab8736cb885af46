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
