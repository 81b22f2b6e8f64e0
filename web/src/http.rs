//! The HTTP side: token check, routing, assets.

use crate::api;
use crate::App;
use std::io::Read;
use std::net::SocketAddr;
use tiny_http::{Header, Method, Request, Response};

const PAGE: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");

/// 128 random bits, hex.
pub fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

pub struct Server {
    http: tiny_http::Server,
    token: String,
}

impl Server {
    pub fn bind(addr: SocketAddr, token: String) -> Result<Server, crate::WebError> {
        let http = tiny_http::Server::http(addr).map_err(|e| crate::WebError::Listen(addr, e.to_string()))?;
        Ok(Server { http, token })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.http.server_addr().to_ip()
    }

    /// The address to open in a browser.
    pub fn url(&self) -> String {
        let addr = self.local_addr().map_or_else(|| "?".into(), |a| a.to_string());
        format!("http://{addr}/?token={}", self.token)
    }

    /// Makes [`Server::run`] return (after the request it is answering, if any).
    pub fn stop(&self) {
        self.http.unblock();
    }

    /// Answers requests until the process ends, or [`Server::stop`].
    pub fn run(&self, app: &App) {
        for request in self.http.incoming_requests() {
            let response = self.answer(app, &request);
            let _ = request.respond(response);
        }
    }

    fn answer(&self, app: &App, request: &Request) -> Response<std::io::Cursor<Vec<u8>>> {
        let (path, query) = split_url(request.url());
        let token = query.iter().find(|(k, _)| k == "token").map(|(_, v)| v.as_str());
        let header_token = request.headers().iter().find(|h| h.field.equiv("X-Heapsnap-Token")).map(|h| h.value.as_str());
        if !token.or(header_token).is_some_and(|t| same(t.as_bytes(), self.token.as_bytes())) {
            return text(403, "heapsnap serve: this address needs the token printed when the server started (?token=...)\n");
        }
        if *request.method() != Method::Get {
            return text(405, "heapsnap serve is read-only\n");
        }
        match path.as_str() {
            "/" => {
                let page = PAGE.replace("{{TOKEN}}", &self.token);
                with_type(Response::from_data(page.into_bytes()), "text/html; charset=utf-8")
            }
            "/app.js" => with_type(Response::from_data(SCRIPT.as_bytes().to_vec()), "text/javascript; charset=utf-8"),
            "/app.css" => with_type(Response::from_data(STYLE.as_bytes().to_vec()), "text/css; charset=utf-8"),
            "/flame.svg" => match crate::api::flame(app, &query) {
                Ok(svg) => flame_svg(svg.to_vec()),
                Err((code, message)) => text(code, &message),
            },
            p if p.starts_with("/api/") => match api::answer(app, &p[5..], &query) {
                Ok(v) => with_type(Response::from_data(serde_json::to_vec(&v).expect("values serialise")), "application/json"),
                Err((code, message)) => text(code, &message),
            },
            _ => text(404, "not found\n"),
        }
    }
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn split_url(url: &str) -> (String, Vec<(String, String)>) {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let pairs = query.split('&').filter(|s| !s.is_empty()).map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (unescape(k), unescape(v))
    });
    (path.to_string(), pairs.collect())
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                Ok(v) => {
                    out.push(v);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn with_type(r: Response<std::io::Cursor<Vec<u8>>>, content_type: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    let r = r.with_header(Header::from_bytes("Content-Type", content_type).expect("a valid header"));
    // Nothing from elsewhere: scripts and styles of this server only, no framing.
    r.with_header(
        Header::from_bytes("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
            .expect("a valid header"),
    )
    .with_header(Header::from_bytes("Cache-Control", "no-store").expect("a valid header"))
}

/// inferno's SVG, shown in an `<object>` of this server's page: its own inline script (zoom,
/// search) and styles may run, it may be framed by this origin only, and it loads nothing.
fn flame_svg(svg: Vec<u8>) -> Response<std::io::Cursor<Vec<u8>>> {
    let policy = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; frame-ancestors 'self'";
    Response::from_data(svg)
        .with_header(Header::from_bytes("Content-Type", "image/svg+xml").expect("a valid header"))
        .with_header(Header::from_bytes("Content-Security-Policy", policy).expect("a valid header"))
        .with_header(Header::from_bytes("Cache-Control", "no-store").expect("a valid header"))
}

fn text(code: u16, message: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    with_type(Response::from_data(message.as_bytes().to_vec()).with_status_code(code), "text/plain; charset=utf-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let (p, q) = split_url("/api/tree?s=0&node=12&token=ab%2Fc+d&x");
        assert_eq!(p, "/api/tree");
        assert_eq!(
            q,
            vec![("s".into(), "0".into()), ("node".into(), "12".into()), ("token".into(), "ab/c d".into()), ("x".into(), "".into())]
        );
        assert_eq!(unescape("%zz%4"), "%zz%4");
        assert!(same(b"abc", b"abc") && !same(b"abc", b"abd") && !same(b"abc", b"ab"));
    }
}
