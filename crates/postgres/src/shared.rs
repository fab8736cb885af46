//! [`Shared`]: what every clone of a store shares: the pool, the
//! statements, and whether the schema is ready (checked at open, or on
//! first use for a lazily connected store).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::{oneshot, watch};
use tokio_postgres::{Row, types::ToSql};
use tollgate_core::{Deadline, StoreError};

use crate::lease::Lease;
use crate::sql::Statements;
use crate::tls::Connector;
use crate::url::Target;
use crate::{Error, PostgresOptions, schema, sweep};

/// The outcome of one attempt to prepare the schema, shared by every call
/// waiting for it.
type Opening = watch::Receiver<Option<Result<(), Arc<Error>>>>;

/// The state shared by the clones of one store.
pub(crate) struct Shared {
    pub(crate) pool: Pool,
    pub(crate) sql: Statements,
    pub(crate) target: Target,
    pub(crate) options: PostgresOptions,
    /// Counter calls made through the store, which decide the ones that
    /// purge expired call records.
    pub(crate) counter_calls: AtomicU64,
    quoted: String,
    ready: AtomicBool,
    opening: Mutex<Option<Opening>>,
    /// Taken by the sweep task when it starts; the sender, dropped with
    /// this struct, stops it.
    sweep_stop: Mutex<Option<oneshot::Receiver<()>>>,
    _stop_sweep: oneshot::Sender<()>,
}

impl Shared {
    /// Checks `url` and `options` and builds the pool; connects nothing.
    pub(crate) fn new(url: &str, options: PostgresOptions) -> Result<Shared, Error> {
        let quoted = options.validate()?;
        let target = Target::parse(url)?;
        let manager = Manager::from_connect(
            target.config.clone(),
            Connector::new(target.mode, target.tls.clone()),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| Error::InvalidOption(pool_error(&e)))?;
        let (stop, stopped) = oneshot::channel();
        Ok(Shared {
            pool,
            sql: Statements::new(&quoted),
            target,
            options,
            counter_calls: AtomicU64::new(0),
            quoted,
            ready: AtomicBool::new(false),
            opening: Mutex::new(None),
            sweep_stop: Mutex::new(Some(stopped)),
            _stop_sweep: stop,
        })
    }

    /// Connects and checks (or creates) the schema, within the connect timeout.
    pub(crate) async fn prepare(&self) -> Result<(), Error> {
        let timeout = self.options.connect_timeout;
        let started = Instant::now();
        let prepared = tokio::time::timeout(timeout, async {
            let deadline = Deadline::after(timeout);
            let mut lease = Lease::take(&self.pool, deadline, started)
                .await
                .map_err(|e| Error::Connect(Box::new(e)))?;
            schema::prepare(&mut lease, &self.options.schema, &self.quoted).await?;
            lease.give_back();
            Ok(())
        })
        .await;
        match prepared {
            Ok(result) => result?,
            Err(_) => {
                return Err(Error::Connect(
                    format!("no answer within the connect timeout of {timeout:?}").into(),
                ));
            }
        }
        self.ready.store(true, Ordering::Release);
        self.start_sweep();
        Ok(())
    }

    /// Makes sure the schema is ready: at once for a store opened with
    /// `open`; for a lazily connected one, by preparing it in a task of its
    /// own (so that a caller giving up does not cancel it) and waiting for
    /// that task. Another failed attempt is started by the next call.
    pub(crate) async fn ensure_ready(self: &Arc<Shared>) -> Result<(), StoreError> {
        if self.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut opening = {
            let mut slot = self.opening.lock().unwrap_or_else(PoisonError::into_inner);
            match slot.as_ref().filter(|o| o.borrow().is_none()) {
                Some(running) => running.clone(),
                None => {
                    let (done, opening) = watch::channel(None);
                    let shared = Arc::clone(self);
                    tokio::spawn(async move {
                        let result = shared.prepare().await.map_err(Arc::new);
                        let _ = done.send(Some(result));
                    });
                    *slot = Some(opening.clone());
                    opening
                }
            }
        };
        let outcome = match opening.wait_for(Option::is_some).await {
            Ok(outcome) => outcome.clone(),
            Err(_) => None,
        };
        match outcome {
            Some(Ok(())) => Ok(()),
            Some(Err(err)) if err.is_transient() => Err(StoreError::Connection(Box::new(err))),
            Some(Err(err)) => Err(StoreError::Backend(Box::new(err))),
            None => Err(StoreError::Connection(
                "the schema could not be prepared".into(),
            )),
        }
    }

    /// Runs `sql` with `params` on a pooled connection: the outer error is
    /// the store's (not ready, no connection by the deadline), the inner one
    /// the statement's.
    pub(crate) async fn query(
        self: &Arc<Shared>,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        deadline: Deadline,
        started: Instant,
    ) -> Result<Result<Vec<Row>, tokio_postgres::Error>, StoreError> {
        self.ensure_ready().await?;
        let lease = Lease::take(&self.pool, deadline, started).await?;
        let result = match lease.prepare_cached(sql).await {
            Ok(statement) => lease.query(&statement, params).await,
            Err(err) => Err(err),
        };
        // The reply is in, whatever it says: nothing runs on the connection.
        lease.give_back();
        Ok(result)
    }

    fn start_sweep(&self) {
        let interval = self.options.sweep_interval;
        if interval.is_zero() {
            return;
        }
        let stop = self
            .sweep_stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(stop) = stop {
            sweep::spawn(
                self.pool.clone(),
                self.sql.sweep.clone(),
                interval,
                self.options.sweep_batch,
                stop,
            );
        }
    }
}

/// The pool builder's error as a static message (it can only be a missing runtime).
fn pool_error(_: &deadpool_postgres::BuildError) -> &'static str {
    "the connection pool could not be built"
}
