//! The store operations, once for every transport: each writes its
//! script's call, takes the one script path ([`eval`]) and reads the reply.
//! A single-endpoint store (TCP, REST) runs each on its whole batch
//! ([`endpoint_store!`]); the cluster store runs each per hash slot; both
//! keep marks through [`mark_store!`].

#[cfg(feature = "tcp")]
use std::time::Instant;

use std::time::Duration;
#[cfg(feature = "tcp")]
use tollgate_core::{Counter, Reservation};

use tollgate_core::{CheckId, Deadline, Leases, StoreError};

use crate::call::Single;
#[cfg(feature = "tcp")]
use crate::call::{self, Counters, Part, Priors};
#[cfg(feature = "tcp")]
use crate::record::Record;
use crate::reply::{self, Reply};
use crate::scripts::{SCRIPTS, Script};
use crate::transport::{Transport, eval, mget};

/// A batch of counters (all of a call's, or one slot's), in order.
#[cfg(feature = "tcp")]
pub(crate) trait Batch<'a>: Iterator<Item = &'a Counter> + Clone + Send {}

#[cfg(feature = "tcp")]
impl<'a, I: Iterator<Item = &'a Counter> + Clone + Send> Batch<'a> for I {}

/// One call of [`CHECK`](crate::scripts::CHECK) (a batch of one): `op` on
/// `counters`, their priors read as `priors` say, recorded as `record`;
/// its own reply, read by [`reply::script_result`].
#[cfg(feature = "tcp")]
pub(crate) async fn single<'a, T: Transport>(
    transport: &T,
    (op, counters, priors): (Counters, impl Batch<'a>, Priors<'_>),
    record: &Record,
    route: &mut T::Route,
    deadline: Deadline,
) -> Result<Reply, StoreError> {
    let started = Instant::now();
    let script = &SCRIPTS.check;
    let parts = [Part {
        op,
        counters,
        record,
        cutoff: deadline.cutoff_unix_millis(),
        priors,
    }];
    let mut args = transport.args(script, call::size(&parts));
    call::write(&mut args, &parts);
    let answer = eval(transport, script, args, route, deadline).await?;
    let [reply] = <[Reply; 1]>::try_from(reply::calls(answer, 1)?)
        .map_err(|_| StoreError::InvalidReply("expected 1 reply".into()))?;
    reply::script_result(reply, started.elapsed())
}

/// A count recorded as `record`, its counters' priors read as `priors`
/// say: the new counts, then the priors' counts.
#[cfg(feature = "tcp")]
pub(crate) async fn count<'a, T: Transport>(
    transport: &T,
    (counters, priors): (impl Batch<'a>, Priors<'_>),
    record: &Record,
    route: &mut T::Route,
    deadline: Deadline,
) -> Result<Vec<u64>, StoreError> {
    let n = reply::answered(counters.clone());
    let call = (Counters::Count, counters, priors);
    let reply = single(transport, call, record, route, deadline).await?;
    reply::counts(reply, n)
}

/// A reservation recorded as `record`, its counters' priors read as
/// `priors` say: whether it applied, and the counts, then the priors'.
#[cfg(feature = "tcp")]
pub(crate) async fn reserve<'a, T: Transport>(
    transport: &T,
    (counters, priors): (impl Batch<'a>, Priors<'_>),
    record: &Record,
    route: &mut T::Route,
    deadline: Deadline,
) -> Result<Reservation, StoreError> {
    let n = reply::answered(counters.clone());
    let call = (Counters::Reserve, counters, priors);
    let reply = single(transport, call, record, route, deadline).await?;
    reply::reservation(reply, n)
}

/// A refund recorded as `record`, or with `give_back` the give-back of the
/// reservation recorded as `record`: the new counts.
#[cfg(feature = "tcp")]
pub(crate) async fn refund<'a, T: Transport>(
    transport: &T,
    counters: impl Batch<'a>,
    (record, give_back): (&Record, bool),
    route: &mut T::Route,
    deadline: Deadline,
) -> Result<Vec<u64>, StoreError> {
    let op = if give_back {
        Counters::GiveBack
    } else {
        Counters::Refund
    };
    let n = counters.clone().count();
    let call = (op, counters, Priors::Keyed);
    let reply = single(transport, call, record, route, deadline).await?;
    reply::counts(reply, n)
}

/// `MGET` (a read: no script): the stored counts, 0 for an absent key.
pub(crate) async fn get<T: Transport>(
    transport: &T,
    keys: &[&str],
    route: &mut T::Route,
    deadline: Deadline,
) -> Result<Vec<u64>, StoreError> {
    let answer = mget(transport, keys, route, deadline).await?;
    reply::stored_counts(answer, keys.len())
}

/// A call of the one-key script `script`, laid out as `layout`, on `key`,
/// its reply read by `read`.
pub(crate) async fn on_key<T: Transport, R>(
    transport: &T,
    (script, layout, key): (&Script, Single<'_>, &str),
    read: fn(&Reply) -> Result<R, StoreError>,
    route: &mut T::Route,
    deadline: Deadline,
) -> Result<R, StoreError> {
    let mut args = transport.args(script, layout.size(key));
    layout.write(&mut args, key, deadline.cutoff_unix_millis());
    read(&eval(transport, script, args, route, deadline).await?)
}

/// [`DELETE`](crate::scripts::DELETE): whether the key existed.
pub(crate) async fn delete<T: Transport>(
    transport: &T,
    key: &str,
    route: &mut T::Route,
    deadline: Deadline,
) -> Result<bool, StoreError> {
    let call = (&SCRIPTS.delete, Single::Delete, key);
    on_key(transport, call, reply::deleted, route, deadline).await
}

/// [`END_LEASE`](crate::scripts::END_LEASE): whether the lease was held.
pub(crate) async fn end_lease<T: Transport>(
    transport: &T,
    (key, id): (&str, CheckId),
    route: &mut T::Route,
    deadline: Deadline,
) -> Result<bool, StoreError> {
    let id = id.to_string();
    let call = (&SCRIPTS.end_lease, Single::EndLease { id: &id }, key);
    on_key(transport, call, reply::flag, route, deadline).await
}

/// [`RENEW_LEASE`](crate::scripts::RENEW_LEASE): whether the lease was held.
pub(crate) async fn renew_lease<T: Transport>(
    transport: &T,
    (key, id, lifetime): (&str, CheckId, Duration),
    route: &mut T::Route,
    deadline: Deadline,
) -> Result<bool, StoreError> {
    let id = id.to_string();
    let layout = Single::RenewLease { id: &id, lifetime };
    let call = (&SCRIPTS.renew_lease, layout, key);
    on_key(transport, call, reply::flag, route, deadline).await
}

/// [`LEASES`](crate::scripts::LEASES): the leases held in the set.
pub(crate) async fn leases<T: Transport>(
    transport: &T,
    key: &str,
    route: &mut T::Route,
    deadline: Deadline,
) -> Result<Leases, StoreError> {
    let call = (&SCRIPTS.leases, Single::Leases, key);
    on_key(transport, call, reply::leases, route, deadline).await
}

/// Implements `Named`, `CounterStore` and `MarkStore` for `$store`, a store reaching
/// one endpoint through the transport `self.$transport` (whose route is
/// `()`), named `$name` in logs and metrics: every operation is one call of
/// the script path on all its counters, counter calls through the
/// [`Batcher`](crate::batch::Batcher) `self.$batch` (so calls waiting
/// together share a script call). An empty call sends nothing.
macro_rules! endpoint_store {
    ($store:ty, $name:literal, $transport:ident, $batch:ident) => {
        impl tollgate_core::Named for $store {
            fn name(&self) -> &'static str {
                $name
            }
        }

        #[tollgate_core::async_trait]
        impl tollgate_core::CounterStore for $store {
            async fn count(
                &self,
                counters: &[tollgate_core::Counter],
                id: tollgate_core::CheckId,
                deadline: tollgate_core::Deadline,
            ) -> Result<Vec<u64>, tollgate_core::StoreError> {
                if counters.is_empty() {
                    return Ok(Vec::new());
                }
                let record = $crate::record::Record::new(id, deadline);
                let op = $crate::call::Counters::Count;
                let reply = self.$batch.call(op, counters, record, deadline).await?;
                $crate::reply::counts(reply, $crate::reply::answered(counters))
            }

            async fn reserve(
                &self,
                counters: &[tollgate_core::Counter],
                id: tollgate_core::CheckId,
                deadline: tollgate_core::Deadline,
            ) -> Result<tollgate_core::Reservation, tollgate_core::StoreError> {
                if counters.is_empty() {
                    return Ok(tollgate_core::Reservation {
                        applied: true,
                        counts: Vec::new(),
                    });
                }
                let record = $crate::record::Record::new(id, deadline);
                let op = $crate::call::Counters::Reserve;
                let reply = self.$batch.call(op, counters, record, deadline).await?;
                $crate::reply::reservation(reply, $crate::reply::answered(counters))
            }

            async fn refund(
                &self,
                counters: &[tollgate_core::Counter],
                id: tollgate_core::CheckId,
                deadline: tollgate_core::Deadline,
            ) -> Result<Vec<u64>, tollgate_core::StoreError> {
                if counters.is_empty() {
                    return Ok(Vec::new());
                }
                let record = $crate::record::Record::new(id, deadline);
                let op = $crate::call::Counters::Refund;
                let reply = self.$batch.call(op, counters, record, deadline).await?;
                $crate::reply::counts(reply, counters.len())
            }

            async fn get(
                &self,
                keys: &[String],
                deadline: tollgate_core::Deadline,
            ) -> Result<Vec<u64>, tollgate_core::StoreError> {
                if keys.is_empty() {
                    return Ok(Vec::new());
                }
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                $crate::ops::get(&*self.$transport, &keys, &mut (), deadline).await
            }

            async fn delete(
                &self,
                key: &str,
                deadline: tollgate_core::Deadline,
            ) -> Result<bool, tollgate_core::StoreError> {
                $crate::ops::delete(&*self.$transport, key, &mut (), deadline).await
            }

            async fn end_lease(
                &self,
                key: &str,
                id: tollgate_core::CheckId,
                deadline: tollgate_core::Deadline,
            ) -> Result<bool, tollgate_core::StoreError> {
                $crate::ops::end_lease(&*self.$transport, (key, id), &mut (), deadline).await
            }

            async fn renew_lease(
                &self,
                key: &str,
                id: tollgate_core::CheckId,
                lifetime: std::time::Duration,
                deadline: tollgate_core::Deadline,
            ) -> Result<bool, tollgate_core::StoreError> {
                let call = (key, id, lifetime);
                $crate::ops::renew_lease(&*self.$transport, call, &mut (), deadline).await
            }

            async fn leases(
                &self,
                key: &str,
                deadline: tollgate_core::Deadline,
            ) -> Result<tollgate_core::Leases, tollgate_core::StoreError> {
                $crate::ops::leases(&*self.$transport, key, &mut (), deadline).await
            }
        }

        $crate::ops::mark_store!($store, $transport, |key| ());
    };
}

/// Implements `MarkStore` for `$store` through the transport
/// `self.$transport`, each mark's call sent to the route `$route` (an
/// expression of the mark's `$key`): one call of the script path per
/// operation, for every store of this crate.
macro_rules! mark_store {
    ($store:ty, $transport:ident, |$key:ident| $route:expr) => {
        #[tollgate_core::async_trait]
        impl tollgate_core::MarkStore for $store {
            async fn claim(
                &self,
                $key: &str,
                token: &str,
                ttl: std::time::Duration,
                deadline: tollgate_core::Deadline,
            ) -> Result<tollgate_core::Claim, tollgate_core::StoreError> {
                let script = &$crate::scripts::SCRIPTS.claim;
                let call = (script, $crate::call::Single::Claim { token, ttl }, $key);
                let read = $crate::reply::claim;
                $crate::ops::on_key(&*self.$transport, call, read, &mut $route, deadline).await
            }

            async fn finish(
                &self,
                $key: &str,
                token: &str,
                ttl: std::time::Duration,
                deadline: tollgate_core::Deadline,
            ) -> Result<bool, tollgate_core::StoreError> {
                let script = &$crate::scripts::SCRIPTS.finish;
                let call = (script, $crate::call::Single::Finish { token, ttl }, $key);
                let read = $crate::reply::flag;
                $crate::ops::on_key(&*self.$transport, call, read, &mut $route, deadline).await
            }

            async fn release(
                &self,
                $key: &str,
                token: &str,
                deadline: tollgate_core::Deadline,
            ) -> Result<bool, tollgate_core::StoreError> {
                let script = &$crate::scripts::SCRIPTS.release;
                let call = (script, $crate::call::Single::Release { token }, $key);
                let read = $crate::reply::flag;
                $crate::ops::on_key(&*self.$transport, call, read, &mut $route, deadline).await
            }
        }
    };
}

pub(crate) use {endpoint_store, mark_store};
