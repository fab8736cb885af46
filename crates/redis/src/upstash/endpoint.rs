//! [`Endpoint`]: an Upstash REST URL and token, checked before any request.

use reqwest::Url;
use reqwest::header::HeaderValue;

use super::Error;

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
    /// with an `upstash+` prefix) and `token`. Surrounding whitespace is
    /// ignored in both.
    pub(crate) fn new(url: &str, token: &str) -> Result<Endpoint, Error> {
        let (root, address) = parse_url(url)?;
        Ok(Endpoint {
            root,
            address,
            authorization: authorization(token)?,
        })
    }
}

fn parse_url(url: &str) -> Result<(Url, String), Error> {
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
    let parsed = Url::parse(&format!("{scheme}://{rest}"))
        .map_err(|_| Error::InvalidUrl("it is not https://HOST or http://HOST:PORT"))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Error::InvalidUrl(
            "it holds user information: the token goes in UPSTASH_REDIS_REST_TOKEN",
        ));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(Error::InvalidUrl("it has a query or a fragment"));
    }
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
    Ok((parsed, address))
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

    fn address(url: &str) -> String {
        Endpoint::new(url, "t")
            .map(|e| e.address)
            .unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    #[test]
    fn reads_every_documented_url_form() {
        assert_eq!(address("http://127.0.0.1:8079"), "127.0.0.1:8079");
        assert_eq!(address("upstash+http://127.0.0.1:8079/"), "127.0.0.1:8079");
        assert_eq!(address("  http://localhost:1\n"), "localhost:1");
        assert_eq!(address("HTTP://[::1]:8079"), "[::1]:8079");
        assert_eq!(address("http://example.com"), "example.com:80");
        let root = Endpoint::new("upstash+http://h:9", "t").unwrap().root;
        assert_eq!(root.as_str(), "http://h:9/");
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
            Endpoint::new("https://h", "t"),
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
            let err = Endpoint::new(&url, "t").map(|_| ()).unwrap_err();
            assert!(
                matches!(err, Error::InvalidUrl(_) | Error::UnsupportedScheme(_)),
                "{url}: {err:?}"
            );
            let text = format!("{err} {err:?}").to_lowercase();
            assert!(!text.contains(&secret.to_lowercase()), "{text}");
            assert!(!text.contains("axxx"), "{text}");
        }
        assert!(matches!(
            Endpoint::new("redis://h", "t").map(|_| ()),
            Err(Error::UnsupportedScheme(s)) if s == "redis"
        ));
    }

    #[test]
    fn refuses_tokens_a_header_cannot_carry() {
        for token in ["", "  ", "a b", "tok\nen", "é"] {
            let err = Endpoint::new("http://h:1", token).map(|_| ()).unwrap_err();
            assert!(matches!(err, Error::InvalidToken(_)), "{token:?}");
        }
        let endpoint = Endpoint::new("http://h:1", " AXabc= \n").unwrap();
        assert_eq!(endpoint.authorization.to_str().unwrap(), "Bearer AXabc=");
        assert!(endpoint.authorization.is_sensitive());
    }
}
