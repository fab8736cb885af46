//! Shared by the axum test binaries.
#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use http::Request;
use http::request::Parts;

/// A request head from `peer` (when given) with `headers`.
pub(crate) fn parts(peer: Option<&str>, headers: &[(&str, &str)]) -> Parts {
    let mut request = Request::get("/");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(()).unwrap();
    if let Some(peer) = peer {
        let addr: SocketAddr = peer.parse().unwrap();
        request.extensions_mut().insert(ConnectInfo(addr));
    }
    request.into_parts().0
}
