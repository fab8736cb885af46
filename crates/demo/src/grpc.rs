//! Ask AI over gRPC: `tollgate.demo.v1.Ask/Ask` (`proto/tollgate/demo/v1/ask.proto`),
//! behind the same rules, visitor identity and store as `POST /sites/{project}/ask`.
//!
//! The project is in the message, not the path, so the handler checks the
//! limits itself once tonic has decoded the request (at most the HTTP
//! route's largest body), before any work: `ask-burst`, `ask`, `ask-site`,
//! `ask-all`, `ask-tokens` (estimated from the question) and the in-flight
//! rules, in one all-or-nothing, fail-closed reservation. A refusal is the
//! status [`tollgate::axum::grpc::status`] maps it to: `RESOURCE_EXHAUSTED`
//! with `RetryInfo` and `QuotaFailure`, `UNAVAILABLE` with `RetryInfo`, or
//! `INVALID_ARGUMENT`. The visitor is the gRPC peer, or what the trusted
//! metadata says (`--trust`), as for HTTP. An answer carries the
//! `ratelimit-policy` and `ratelimit` metadata, and holds its in-flight
//! leases until it has been sent ([`HoldLeasesLayer`], which [`serve`]
//! puts in front of the service).

use std::time::Duration;

use tokio::net::TcpListener;
use tollgate::tower::{HoldLeasesLayer, grpc};
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use crate::app::{Demo, invalid_name};
use crate::{estimate_tokens, is_valid_name};

/// The code generated from `proto/tollgate/demo/v1/ask.proto`: the
/// messages, the server and the client.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod proto {
    tonic::include_proto!("tollgate.demo.v1");
}

use proto::ask_server::{Ask, AskServer};
use proto::{AskReply, AskRequest};

/// The `Ask` service; serve it with [`serve`].
#[derive(Clone, Debug)]
pub struct AskService {
    demo: Demo,
}

impl AskService {
    pub(crate) fn new(demo: Demo) -> AskService {
        AskService { demo }
    }

    /// The tonic service, decoding requests of at most the HTTP route's
    /// largest ask body.
    pub(crate) fn into_server(self) -> AskServer<AskService> {
        let max = usize::try_from(self.demo.ask.max_body).unwrap_or(usize::MAX);
        AskServer::new(self).max_decoding_message_size(max)
    }
}

#[tonic::async_trait]
impl Ask for AskService {
    async fn ask(&self, request: Request<AskRequest>) -> Result<Response<AskReply>, Status> {
        let result = self.answer(request).await;
        let code = match &result {
            Ok(_) => tonic::Code::Ok,
            Err(status) => status.code(),
        };
        tracing::info!(rpc = "tollgate.demo.v1.Ask/Ask", code = ?code, "grpc call");
        result
    }
}

impl AskService {
    async fn answer(&self, request: Request<AskRequest>) -> Result<Response<AskReply>, Status> {
        let demo = &self.demo;
        let visitor = grpc::visitor(&demo.visitors, &request)?;
        let AskRequest { project, question } = request.into_inner();
        if !is_valid_name(&project) {
            return Err(Status::invalid_argument(invalid_name("project")));
        }
        let verdict = demo
            .admit_ask(&project, visitor.as_str(), estimate_tokens(&question))
            .await
            .map_err(|refused| grpc::status(&refused))?;
        let (answer, used) = demo.answer_ask(&verdict, &question).await;
        let mut response = Response::new(AskReply {
            answer,
            tokens: used,
        });
        grpc::insert_fields(&verdict, response.metadata_mut());
        // Its leases are held until the answer has been sent.
        response.extensions_mut().insert(verdict);
        Ok(response)
    }
}

/// Calls in flight at once on one connection, at most; past it the next
/// waits for one to end.
pub const MAX_CALLS_PER_CONNECTION: usize = 64;

/// Serves `service` on `listener` (HTTP/2 without TLS) until `shutdown`
/// completes (then the calls in flight end) or the server fails, holding
/// each answer's leases until it has been sent.
///
/// # Errors
///
/// The server's failure.
pub async fn serve(
    listener: TcpListener,
    service: AskService,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .concurrency_limit_per_connection(MAX_CALLS_PER_CONNECTION)
        // A peer gone silent is found and its connection closed.
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .layer(HoldLeasesLayer)
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
