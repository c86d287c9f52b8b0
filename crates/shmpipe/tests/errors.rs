//! What errors say: each names what went wrong (the path, the value) with
//! one `shmpipe: ` prefix, and, where a mix-up of the caller's is the
//! usual cause, what to check.

use std::io::{ErrorKind, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

fn sock_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("shmpipe-test-{tag}-{}.sock", std::process::id()))
}

#[test]
fn a_bad_capacity_is_the_callers_and_says_what_would_do() {
    for capacity in [1000, 4, 0] {
        let e = shmpipe::Options::new()
            .capacity(capacity)
            .pipe()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        let text = e.to_string();
        assert_eq!(text.matches("shmpipe:").count(), 1, "{text}");
        assert!(
            text.contains(&format!("bad ring capacity {capacity}"))
                && text.contains("a power of two of at least 8"),
            "{text}"
        );
    }
}

#[test]
fn connect_names_the_path_it_found_no_listener_at() {
    let missing = sock_path("nobody-here");
    let _ = std::fs::remove_file(&missing);
    let e = shmpipe::connect(&missing).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(
        e.to_string().contains(&missing.display().to_string()),
        "{e}"
    );
    // A socket file nobody listens on (its server was killed).
    let stale = sock_path("nobody-listens");
    let _ = std::fs::remove_file(&stale);
    drop(UnixListener::bind(&stale).unwrap());
    let e = shmpipe::connect(&stale).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
    assert!(e.to_string().contains(&stale.display().to_string()), "{e}");
    std::fs::remove_file(&stale).unwrap();
}

#[test]
fn a_message_end_fed_bytes_asks_whether_the_other_side_is_a_stream_end() {
    let path = sock_path("mixed-ends");
    let _ = std::fs::remove_file(&path);
    let listener = shmpipe::Listener::bind(&path).unwrap();
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let client = std::thread::spawn(move || {
        // The client writes text through its stream end...
        let mut conn = shmpipe::connect(&path).unwrap();
        conn.writer.write_all(b"not a message, plain text").unwrap();
        let _ = wait.recv();
    });
    // ...where the server reads messages.
    let (mut rx, _tx) = listener.accept().unwrap().into_messages();
    let mut buf = Vec::new();
    let e = rx.recv_vec(&mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("corrupt message header") && text.contains("is the other side a stream end?"),
        "{text}"
    );
    assert_eq!(text.matches("shmpipe:").count(), 1, "{text}");
    done.send(()).unwrap();
    client.join().unwrap();
}
