//! [`Endpoint`]: an Upstash REST URL and token, checked before any request.

use std::net::IpAddr;

use reqwest::Url;
use reqwest::header::HeaderValue;

use super::Error;
use super::options::{PlainHttp, UpstashOptions};

/// The query that opts a URL in to plain `http://` on a trusted network,
/// as [`PlainHttp::TrustedNetwork`] does.
pub(crate) const TRUSTED_NETWORK_QUERY: &str = "plain-http=trusted-network";

/// Where requests go and how they authenticate.
pub(crate) struct Endpoint {
    /// `scheme://host:port/`, nothing else.
    pub(crate) root: Url,
    /// `host:port`: the only part of the endpoint errors and logs show.
    pub(crate) address: String,
    /// `Bearer <token>`, marked sensitive.
    pub(crate) authorization: HeaderValue,
}

impl Endpoint {
    /// Reads `url` (`https://HOST[:PORT]`, `http://HOST[:PORT]`, or either
    /// with an `upstash+` prefix, and optionally the query
    /// [`TRUSTED_NETWORK_QUERY`]) and `token`. Surrounding whitespace is
    /// ignored in both. `http://` is refused to a host that is not loopback
    /// unless `options` or the URL opt in.
    pub(crate) fn new(url: &str, token: &str, options: &UpstashOptions) -> Result<Endpoint, Error> {
        let (root, address) = parse_url(url, options)?;
        Ok(Endpoint {
            root,
            address,
            authorization: authorization(token)?,
        })
    }
}

fn parse_url(url: &str, options: &UpstashOptions) -> Result<(Url, String), Error> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(Error::InvalidUrl(
            "expected https://HOST or http://HOST:PORT",
        ));
    };
    let lower = scheme.to_ascii_lowercase();
    let scheme = lower.strip_prefix("upstash+").unwrap_or(&lower);
    match scheme {
        #[cfg(not(feature = "tls"))]
        "https" => return Err(Error::TlsNotEnabled),
        #[cfg(feature = "tls")]
        "https" => {}
        "http" => {}
        // Echoed only when it looks like a scheme, never a pasted secret.
        other
            if other.len() <= 16
                && other
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) =>
        {
            return Err(Error::UnsupportedScheme(other.to_owned()));
        }
        _ => return Err(Error::UnsupportedScheme("?".into())),
    }
    let mut parsed = Url::parse(&format!("{scheme}://{rest}"))
        .map_err(|_| Error::InvalidUrl("it is not https://HOST or http://HOST:PORT"))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Error::InvalidUrl(
            "it holds user information: the token goes in UPSTASH_REDIS_REST_TOKEN",
        ));
    }
    if parsed.fragment().is_some() {
        return Err(Error::InvalidUrl("it has a fragment"));
    }
    let trusted_network = match parsed.query() {
        None => options.plain_http == PlainHttp::TrustedNetwork,
        Some(TRUSTED_NETWORK_QUERY) => true,
        Some(_) => {
            return Err(Error::InvalidUrl(
                "it has a query: the only one allowed is ?plain-http=trusted-network",
            ));
        }
    };
    parsed.set_query(None);
    if parsed.path() != "/" {
        return Err(Error::InvalidUrl(
            "it has a path: expected https://HOST or http://HOST:PORT",
        ));
    }
    let host = parsed
        .host_str()
        .filter(|host| !host.is_empty())
        .ok_or(Error::InvalidUrl("it has no host"))?;
    let port = parsed
        .port_or_known_default()
        .ok_or(Error::InvalidUrl("it has no port"))?;
    let address = format!("{host}:{port}");
    if scheme == "http" && !trusted_network && !is_loopback(host) {
        return Err(Error::PlainHttp { address });
    }
    Ok((parsed, address))
}

/// Whether `host` (as a parsed URL writes it: lowercase, IPv6 in brackets,
/// IPv4 in dotted decimal) is this machine without asking a resolver: a
/// literal loopback address (`127.0.0.0/8`, `::1`) or the exact name
/// `localhost`. Any other name is not, whatever it resolves to.
fn is_loopback(host: &str) -> bool {
    if host == "localhost" {
        return true;
    }
    let literal = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    literal.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn authorization(token: &str) -> Result<HeaderValue, Error> {
    let token = token.trim();
    if token.is_empty() {
        return Err(Error::InvalidToken("it is empty"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::InvalidToken(
            "it holds spaces, control or non-ASCII characters",
        ));
    }
    let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| Error::InvalidToken("it cannot be sent in an HTTP header"))?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn endpoint(url: &str, token: &str) -> Result<Endpoint, Error> {
        Endpoint::new(url, token, &UpstashOptions::default())
    }

    fn address(url: &str) -> String {
        endpoint(url, "t")
            .map(|e| e.address)
            .unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    fn trusted() -> UpstashOptions {
        UpstashOptions::default().plain_http(PlainHttp::TrustedNetwork)
    }

    #[test]
    fn reads_every_documented_url_form() {
        assert_eq!(address("http://127.0.0.1:8079"), "127.0.0.1:8079");
        assert_eq!(address("upstash+http://127.0.0.1:8079/"), "127.0.0.1:8079");
        assert_eq!(address("  http://localhost:1\n"), "localhost:1");
        assert_eq!(address("HTTP://[::1]:8079"), "[::1]:8079");
        assert_eq!(address("http://LOCALHOST:2"), "localhost:2");
        assert_eq!(address("http://127.9.8.7:1"), "127.9.8.7:1");
        let root = endpoint("upstash+http://127.0.0.1:9", "t").unwrap().root;
        assert_eq!(root.as_str(), "http://127.0.0.1:9/");
    }

    #[test]
    fn plain_http_to_a_host_that_is_not_loopback_is_refused_naming_the_rule() {
        for (url, shown) in [
            ("http://example.com", "example.com:80"),
            ("upstash+http://h:9", "h:9"),
            ("http://10.0.0.5:8079", "10.0.0.5:8079"),
            ("http://192.168.1.2:1", "192.168.1.2:1"),
            ("http://[::2]:1", "[::2]:1"),
            ("http://[::ffff:127.0.0.1]:1", "[::ffff:7f00:1]:1"),
            ("http://0.0.0.0:1", "0.0.0.0:1"),
            // Names are not resolved: only the exact name `localhost` is.
            ("http://localhost.:1", "localhost.:1"),
            ("http://localhost.example.com:1", "localhost.example.com:1"),
            ("http://127.0.0.1.nip.io:1", "127.0.0.1.nip.io:1"),
        ] {
            match endpoint(url, "t") {
                Err(Error::PlainHttp { address }) => assert_eq!(address, shown, "{url}"),
                Err(other) => panic!("{url}: {other:?}"),
                Ok(_) => panic!("{url} opened"),
            }
            let text = endpoint(url, "t").map(|_| ()).unwrap_err().to_string();
            assert!(
                text.contains("clear text")
                    && text.contains("https://")
                    && text.contains("?plain-http=trusted-network"),
                "{text}"
            );
        }
    }

    #[test]
    fn plain_http_to_a_trusted_network_is_an_explicit_opt_in() {
        let opened = |url: &str, options: &UpstashOptions| {
            Endpoint::new(url, "t", options)
                .map(|e| (e.address, e.root.to_string()))
                .unwrap_or_else(|e| panic!("{url}: {e}"))
        };
        let want = (
            "10.0.0.5:8079".to_owned(),
            "http://10.0.0.5:8079/".to_owned(),
        );
        assert_eq!(opened("http://10.0.0.5:8079", &trusted()), want);
        // The URL form; the query is not sent.
        for url in [
            "http://10.0.0.5:8079?plain-http=trusted-network",
            "upstash+http://10.0.0.5:8079/?plain-http=trusted-network",
        ] {
            assert_eq!(opened(url, &UpstashOptions::default()), want, "{url}");
        }
        // Anything else in the query is refused, and not echoed.
        for url in [
            "http://10.0.0.5:8079?plain-http=yes",
            "http://10.0.0.5:8079?PLAIN-HTTP=TRUSTED-NETWORK",
            "http://10.0.0.5:8079?plain-http=trusted-network&x=1",
            "http://10.0.0.5:8079?plain-http",
        ] {
            let err = endpoint(url, "t").map(|_| ()).unwrap_err();
            assert!(matches!(err, Error::InvalidUrl(_)), "{url}: {err:?}");
        }
        // The opt-in changes nothing for https or loopback.
        assert_eq!(
            opened("http://127.0.0.1:1?plain-http=trusted-network", &trusted()).0,
            "127.0.0.1:1"
        );
        assert_eq!(
            format!("{:?}", trusted()),
            "UpstashOptions { plain_http: TrustedNetwork }"
        );
    }

    #[cfg(feature = "tls")]
    #[test]
    fn reads_https_urls() {
        assert_eq!(
            address("https://eu1-fine-cat-1.upstash.io"),
            "eu1-fine-cat-1.upstash.io:443"
        );
        assert_eq!(address("upstash+https://h.upstash.io/"), "h.upstash.io:443");
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn https_needs_the_tls_feature() {
        assert!(matches!(
            endpoint("https://h", "t"),
            Err(Error::TlsNotEnabled)
        ));
    }

    #[test]
    fn refuses_other_urls_with_typed_errors_that_hide_them() {
        // As long as a real token; a scheme is echoed only when it is 16
        // characters or fewer of what schemes are made of.
        let secret = "AXXXsecretTOKENwithMoreThan16";
        let cases = [
            "127.0.0.1:8079".to_owned(),
            "redis://127.0.0.1:6390".to_owned(),
            format!("{secret}://h"),
            format!("{}://h", &secret[..12].replace('s', " ")),
            format!("http://user:{secret}@h:1"),
            format!("http://{secret}@h:1"),
            format!("http://h:1/?_token={secret}"),
            format!("http://h:1/{secret}"),
            format!("http://h:1/#{secret}"),
            "http://".to_owned(),
            "http://h:99999".to_owned(),
            String::new(),
        ];
        for url in cases {
            let err = Endpoint::new(&url, "t", &trusted())
                .map(|_| ())
                .unwrap_err();
            assert!(
                matches!(err, Error::InvalidUrl(_) | Error::UnsupportedScheme(_)),
                "{url}: {err:?}"
            );
            let text = format!("{err} {err:?}").to_lowercase();
            assert!(!text.contains(&secret.to_lowercase()), "{text}");
            assert!(!text.contains("axxx"), "{text}");
        }
        assert!(matches!(
            endpoint("redis://h", "t").map(|_| ()),
            Err(Error::UnsupportedScheme(s)) if s == "redis"
        ));
    }

    #[test]
    fn refuses_tokens_a_header_cannot_carry() {
        for token in ["", "  ", "a b", "tok\nen", "é"] {
            let err = endpoint("http://127.0.0.1:1", token)
                .map(|_| ())
                .unwrap_err();
            assert!(matches!(err, Error::InvalidToken(_)), "{token:?}");
        }
        let endpoint = endpoint("http://127.0.0.1:1", " AXabc= \n").unwrap();
        assert_eq!(endpoint.authorization.to_str().unwrap(), "Bearer AXabc=");
        assert!(endpoint.authorization.is_sensitive());
    }
}
