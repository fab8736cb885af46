//! For the fuzz targets only (not a stable API): what the store makes of a
//! REST answer's body, through the same functions its calls use.

use std::time::Duration;

use tollgate_core::{Claim, Reservation, StoreError};

use crate::reply;

/// What the store makes of one REST answer to each of its calls that name
/// `counters` counters.
#[derive(Debug)]
pub struct Readings {
    /// As the answer to the count or refund script.
    pub counts: Result<Vec<u64>, StoreError>,
    /// As the answer to the reserve script.
    pub reservation: Result<Reservation, StoreError>,
    /// As the answer to `MGET` (a status read).
    pub stored: Result<Vec<u64>, StoreError>,
    /// As the answer to the claim script.
    pub claim: Result<Claim, StoreError>,
    /// As the answer to `DEL`.
    pub deleted: Result<bool, StoreError>,
}

/// Reads `body`, the answer with HTTP `status` (200 or 400: other statuses
/// never reach the body), as every call of the store would.
pub fn read(status: u16, body: &[u8], counters: usize) -> Readings {
    let answer = || super::answer::read(status, body);
    let script = || answer().and_then(|r| reply::script_result(r, Duration::ZERO));
    Readings {
        counts: script().and_then(|r| reply::counts(r, counters)),
        reservation: script().and_then(|r| reply::reservation(r, counters)),
        stored: answer().and_then(|r| reply::stored_counts(r, counters)),
        claim: script().and_then(|r| reply::claim(&r)),
        deleted: answer().and_then(|r| reply::deleted(&r)),
    }
}
