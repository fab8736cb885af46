//! The `upstash_reply` target: what the Upstash store makes of a REST
//! answer's body ([`tollgate_redis::upstash::fuzz::read`]).

use serde_json::Value;
use tollgate_core::{Claim, MAX_COUNT};
use tollgate_redis::upstash::fuzz::read;

/// Reads the body of `data` (after one byte: bit 0 picks HTTP 200 or 400,
/// the rest how many counters the call named, 0 to 7) as the answer to
/// every call of the store; panics when a property breaks:
///
/// - nothing but a JSON object `{"result": …}` under HTTP 200 is ever
///   accepted as a result;
/// - accepted counts number exactly the counters, each at most
///   [`MAX_COUNT`], and are the JSON integers of the result, in order;
/// - a result that is an array of that many integers in `0..=MAX_COUNT`
///   is accepted as counts, and as a reservation when it has one more
///   element, 0 or 1, in front;
/// - a claim is accepted exactly for a result of 0 or 1.
pub fn upstash_reply(data: &[u8]) {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let status = if flags & 1 == 0 { 200 } else { 400 };
    let counters = usize::from(flags >> 1) % 8;
    let readings = read(status, body, counters);
    let result = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) if status == 200 && map.len() == 1 => map.get("result").cloned(),
        _ => None,
    };
    let any_ok = readings.counts.is_ok()
        || readings.reservation.is_ok()
        || readings.stored.is_ok()
        || readings.claim.is_ok()
        || readings.deleted.is_ok();
    assert!(
        !any_ok || result.is_some(),
        "{status} {body:?}: {readings:?}"
    );
    let Some(result) = result else {
        return;
    };
    let ints = |values: &[Value]| -> Option<Vec<u64>> {
        values
            .iter()
            .map(|v| v.as_u64().filter(|n| *n <= MAX_COUNT))
            .collect()
    };
    let array = result.as_array().map(Vec::as_slice).unwrap_or_default();
    let expected_counts = result
        .as_array()
        .and_then(|a| ints(a))
        .filter(|c| c.len() == counters);
    match (&readings.counts, &expected_counts) {
        (Ok(counts), Some(expected)) => assert_eq!(counts, expected, "{body:?}"),
        (Ok(counts), None) => panic!("{body:?} accepted as counts {counts:?}"),
        (Err(e), Some(_)) => panic!("{body:?} refused as counts: {e}"),
        (Err(_), None) => {}
    }
    if let Ok(reservation) = &readings.reservation {
        assert_eq!(reservation.counts.len(), counters, "{body:?}");
        assert_eq!(array.len(), counters + 1, "{body:?}");
        assert_eq!(
            Some(reservation.counts.clone()),
            ints(&array[1..]),
            "{body:?}"
        );
    } else if let Some(all) = ints(array)
        && all.len() == counters + 1
        && all[0] <= 1
        && !array.is_empty()
    {
        panic!(
            "{body:?} refused as a reservation: {:?}",
            readings.reservation
        );
    }
    if let Ok(stored) = &readings.stored {
        assert_eq!(stored.len(), counters, "{body:?}");
        assert!(stored.iter().all(|n| *n <= MAX_COUNT), "{body:?}");
    }
    let flag = result.as_u64().filter(|n| *n <= 1);
    match (&readings.claim, flag) {
        (Ok(claim), Some(n)) => assert_eq!(*claim == Claim::Acquired, n == 1, "{body:?}"),
        (Ok(claim), None) => panic!("{body:?} accepted as a claim {claim:?}"),
        (Err(e), Some(_)) => panic!("{body:?} refused as a claim: {e}"),
        (Err(_), None) => {}
    }
}
