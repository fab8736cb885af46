//! [`Proxy`]: `tollgate-rest-proxy` served in-process, on a thread and a
//! runtime of its own (each `#[tokio::test]` has its own runtime, and a
//! proxy shared by several tests must outlive each of them).

use std::net::SocketAddr;
use std::thread::JoinHandle;

use tokio::net::TcpListener;
use tollgate_rest_proxy::Options;

use super::TOKEN;

/// A running proxy in front of one Redis URL, admitting [`TOKEN`].
pub struct Proxy {
    port: u16,
    redis_url: String,
    running: Option<(tokio::sync::oneshot::Sender<()>, JoinHandle<()>)>,
}

impl Proxy {
    /// A proxy on a free loopback port in front of `redis_url`.
    pub fn start(redis_url: &str) -> Proxy {
        Proxy::start_on(0, redis_url)
    }

    /// A proxy on `port` (0: a free one) in front of `redis_url`.
    pub fn start_on(port: u16, redis_url: &str) -> Proxy {
        let mut proxy = Proxy {
            port,
            redis_url: redis_url.to_owned(),
            running: None,
        };
        proxy.serve();
        proxy
    }

    fn serve(&mut self) {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<SocketAddr>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let options = Options::new(self.redis_url.clone(), TOKEN).create_user("tollgate-proxy");
        let port = self.port;
        let thread = std::thread::Builder::new()
            .name(format!("rest-proxy-{port}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
                    ready_tx.send(listener.local_addr().unwrap()).unwrap();
                    tokio::select! {
                        served = tollgate_rest_proxy::serve(listener, options) => {
                            panic!("the proxy stopped serving: {served:?}");
                        }
                        _ = stop_rx => {}
                    }
                });
                // Dropping the runtime ends every connection task: sockets close.
                drop(runtime);
            })
            .unwrap();
        self.port = ready_rx.recv().unwrap().port();
        self.running = Some((stop_tx, thread));
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The proxy's port (kept across [`stop`](Proxy::stop) and [`restart`](Proxy::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops serving: the listener and every open connection close.
    pub fn stop(&mut self) {
        if let Some((stop, thread)) = self.running.take() {
            let _ = stop.send(());
            thread.join().unwrap();
        }
    }

    /// Serves again on the same port.
    pub fn restart(&mut self) {
        self.stop();
        self.serve();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.running.take() {
            let _ = stop.send(());
            let _ = thread.join();
        }
    }
}
