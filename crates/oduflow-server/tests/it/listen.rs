//! The listeners of `oduflow serve` and of a worker's `--metrics-listen`
//! (one accept loop): a client that never finishes its headers is cut
//! after the header timeout, and at most the cap of connections is held at
//! once, so slow clients cannot starve the file limit or the real ones.

use oduflow_server::listen::{ListenLimits, serve_router};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Slow clients opened (more than the cap, far below the file limit).
const SLOW: usize = 200;
/// The longest the legitimate request may wait: a few rounds of the
/// header timeout below, with room for a loaded machine.
const ANSWER_BOUND: Duration = Duration::from_secs(20);
/// The longest a slow connection may stay open once the answer came.
const CLOSE_BOUND: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_are_cut_and_a_real_request_is_still_answered() {
    let limits = ListenLimits { header_read_timeout: Duration::from_secs(1), connections_max: 64 };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/health", axum::routing::get(|| async { "ok\n" }));
    tokio::spawn(serve_router(listener, app, std::future::pending(), limits));
    let mut slow = Vec::with_capacity(SLOW);
    for _ in 0..SLOW {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        // The request line and one header, never the blank line.
        s.write_all(b"GET /health HTTP/1.1\r\nHost: slow\r\n").await.unwrap();
        slow.push(s);
    }
    let asked = Instant::now();
    let answer = tokio::time::timeout(ANSWER_BOUND, async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"GET /health HTTP/1.1\r\nHost: real\r\nConnection: close\r\n\r\n").await?;
        let mut text = String::new();
        s.read_to_string(&mut text).await?;
        std::io::Result::Ok(text)
    })
    .await;
    let text = match answer {
        Ok(Ok(text)) => text,
        Ok(Err(e)) => panic!("the real request failed behind {SLOW} slow ones: {e}"),
        Err(_) => panic!("the real request was not answered within {ANSWER_BOUND:?} behind {SLOW} slow ones"),
    };
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let mut open = 0;
    for mut s in slow {
        let left = CLOSE_BOUND.saturating_sub(asked.elapsed());
        let mut buf = [0u8; 512];
        // Closed: end of file (perhaps after a 408), or a reset.
        let closed = loop {
            match tokio::time::timeout(left, s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break true,
                Ok(Ok(_)) => continue,
                Err(_) => break false,
            }
        };
        open += usize::from(!closed);
    }
    assert_eq!(open, 0, "slow connections still open {CLOSE_BOUND:?} after the real request was asked");
}
