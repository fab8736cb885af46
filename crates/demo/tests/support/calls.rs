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
}
