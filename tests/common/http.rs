//! A plain HTTP/1.1 client over a TcpStream for the tests that talk to `sprout serve`: one
//! request per connection, the reply read to its end (chunked bodies decoded).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

/// One HTTP response.
pub struct Reply {
    pub status: u16,
    #[allow(dead_code)] // not every test reads headers
    pub headers: String,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    #[allow(dead_code)] // not every test reads headers
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// The bytes of an HTTP/1.1 request that closes its connection after the response.
pub fn request_bytes(
    port: u16,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &[u8],
) -> Vec<u8> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Decodes a chunked body.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = raw.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = std::str::from_utf8(&raw[..end]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[end + 2..end + 2 + size]);
        raw = &raw[end + 2 + size + 2..];
    }
}

pub fn parse_reply(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete response head");
    let headers = String::from_utf8(raw[..split].to_vec()).unwrap();
    let status = headers.split(' ').nth(1).unwrap().parse().unwrap();
    let body = &raw[split + 4..];
    let chunked = headers.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_vec()
    };
    Reply {
        status,
        headers,
        body: String::from_utf8(body).unwrap(),
    }
}

pub fn http(port: u16, method: &str, path: &str, headers: &[&str], body: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(300)))
        .unwrap();
    stream
        .write_all(&request_bytes(port, method, path, headers, body))
        .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    parse_reply(&raw)
}

/// Posts `body` as JSON to `path`.
#[allow(dead_code)] // not every test posts JSON
pub fn post_json(port: u16, path: &str, body: &Value) -> Reply {
    http(port, "POST", path, &[], body.to_string().as_bytes())
}

/// Posts `body` as JSON to `path` and expects a 200; its JSON.
#[allow(dead_code)] // not every test posts JSON
pub fn ok_json(port: u16, path: &str, body: &Value) -> Value {
    let reply = post_json(port, path, body);
    assert_eq!(reply.status, 200, "{path} {body}: {}", reply.body);
    reply.json()
}

/// The tokens the server has generated so far (`/metrics`' `vllm:generation_tokens_total`,
/// summed over its labels).
#[allow(dead_code)] // not every test reads the metrics
pub fn generated(port: u16) -> f64 {
    let text = http(port, "GET", "/metrics", &[], b"").body;
    text.lines()
        .filter(|l| l.starts_with("vllm:generation_tokens_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits (60 s at most) until the server has generated tokens past `before`.
#[allow(dead_code)] // not every test reads the metrics
pub fn await_generated(port: u16, before: f64) {
    let start = std::time::Instant::now();
    while generated(port) <= before {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "nothing was generated"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
