//! A hook recording every store call the demo makes.
#![allow(clippy::unwrap_used)]

use std::sync::Mutex;

use tollgate::observe::Op;
use tollgate::{Hook, StoreError, async_trait};

/// Records every store call the demo makes.
#[derive(Debug, Default)]
pub(crate) struct Calls(Mutex<Vec<Op>>);

#[async_trait]
impl Hook for Calls {
    async fn before(&self, call: Op) -> Result<(), StoreError> {
        self.0.lock().unwrap().push(call);
        Ok(())
    }
}

impl Calls {
    /// The calls recorded since the last `take`, oldest first.
    pub(crate) fn take(&self) -> Vec<Op> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }

    /// [`take`](Calls::take), once `ended` leases have been ended among
    /// the calls (released in the background when an answer has been
    /// sent), or after 5 s.
    #[allow(dead_code)]
    pub(crate) async fn take_once_ended(&self, ended: usize) -> Vec<Op> {
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let ends = || {
            let calls = self.0.lock().unwrap();
            calls.iter().filter(|op| **op == Op::EndLease).count()
        };
        while ends() < ended && std::time::Instant::now() < give_up {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        self.take()
    }
}
