//! The tokio API across processes: a server on a current-thread runtime
//! accepts clients from several processes (each with its own runtime)
//! and echoes over async message ends; stream ends through tokio's
//! `read_exact`/`write_all`; `select!` over a shmpipe end and a socket; a
//! killed peer ends the task's wait instead of spinning it.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{fork, serial, watchdog};
use shmpipe::tokio::{AsyncListener, AsyncReader, AsyncReceiver, AsyncSender, AsyncWriter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMIT: Duration = Duration::from_secs(60);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn sock_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("shmpipe-test-{tag}-{}.sock", std::process::id()))
}

#[test]
fn echo_server_and_clients_in_several_processes() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    const CLIENTS: u64 = 6;
    const ROUNDS: u64 = 500;
    let path = sock_path("tokio-echo");
    let listener = shmpipe::Listener::bind(&path).unwrap();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let path = path.clone();
            fork(move || {
                rt().block_on(async {
                    let (rx, tx) = shmpipe::connect(&path).unwrap().into_messages();
                    let (mut rx, mut tx) = (
                        AsyncReceiver::new(rx).unwrap(),
                        AsyncSender::new(tx).unwrap(),
                    );
                    // Some clients park at once, so the wake path runs too.
                    if c % 2 == 0 {
                        rx.get_mut().set_spin(Duration::ZERO);
                    }
                    let mut buf = [0u8; 16];
                    for i in 0..ROUNDS {
                        let msg = [c.to_le_bytes(), i.to_le_bytes()].concat();
                        tx.send(&msg).await.unwrap();
                        let n = rx.recv(&mut buf).await.unwrap();
                        assert_eq!(&buf[..n], &msg[..]);
                    }
                });
                0
            })
        })
        .collect();
    rt().block_on(async {
        let listener = AsyncListener::new(listener).unwrap();
        let mut tasks = Vec::new();
        for _ in 0..CLIENTS {
            let (rx, tx) = listener.accept().await.unwrap().into_messages();
            let (mut rx, mut tx) = (
                AsyncReceiver::new(rx).unwrap(),
                AsyncSender::new(tx).unwrap(),
            );
            tasks.push(tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut n = 0;
                loop {
                    match rx.recv_vec(&mut buf).await {
                        Ok(()) => tx.send(&buf).await.unwrap(),
                        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return n,
                        Err(e) => panic!("{e}"),
                    }
                    n += 1;
                }
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), ROUNDS);
        }
    });
    for c in clients {
        c.join();
    }
}

#[test]
fn stream_ends_with_read_exact_and_write_all() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (r, w) = shmpipe::Options::new().capacity(4096).pipe().unwrap();
    let child = fork(move || {
        rt().block_on(async {
            let mut w = AsyncWriter::new(w).unwrap();
            let data: Vec<u8> = (0..100_000u32).map(|i| common::pattern(i.into())).collect();
            // More than the ring: the writer parks on a full ring.
            w.write_all(&data).await.unwrap();
            w.flush().await.unwrap();
        });
        0
    });
    rt().block_on(async {
        let mut r = AsyncReader::new(r).unwrap();
        r.get_mut().set_spin(Duration::ZERO);
        let mut got = vec![0u8; 100_000];
        r.read_exact(&mut got).await.unwrap();
        common::check(&got, 0);
        // Then EOF, once the writer is gone.
        assert_eq!(r.read(&mut [0u8; 8]).await.unwrap(), 0);
    });
    child.join();
}

#[test]
fn select_over_a_shmpipe_end_and_a_socket() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (rx, tx) = shmpipe::message_pipe().unwrap();
    let (sock_a, sock_b) = std::os::unix::net::UnixStream::pair().unwrap();
    let child = fork(move || {
        let (mut tx, mut sock_b) = (tx, sock_b);
        use std::io::Write;
        for i in 0..50u8 {
            if i % 2 == 0 {
                tx.send(&[i]).unwrap();
            } else {
                sock_b.write_all(&[i]).unwrap();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        0
    });
    rt().block_on(async {
        let mut rx = AsyncReceiver::new(rx).unwrap();
        sock_a.set_nonblocking(true).unwrap();
        let mut sock = tokio::net::UnixStream::from_std(sock_a).unwrap();
        let (mut from_pipe, mut from_sock) = (Vec::new(), Vec::new());
        let mut b = [0u8; 1];
        let mut s = [0u8; 1];
        while from_pipe.len() + from_sock.len() < 50 {
            tokio::select! {
                r = rx.recv(&mut b) => { r.unwrap(); from_pipe.push(b[0]); }
                r = sock.read_exact(&mut s) => { r.unwrap(); from_sock.push(s[0]); }
            }
        }
        assert_eq!(from_pipe, (0..50).step_by(2).collect::<Vec<u8>>());
        assert_eq!(from_sock, (1..50).step_by(2).collect::<Vec<u8>>());
    });
    child.join();
}

#[test]
fn a_killed_peer_ends_the_wait() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (rx, tx) = shmpipe::message_pipe().unwrap();
    let (r, w) = shmpipe::pipe().unwrap();
    let child = fork(move || {
        let _keep = (tx, r);
        std::thread::sleep(Duration::from_secs(600));
        0
    });
    rt().block_on(async {
        let mut rx = AsyncReceiver::new(rx).unwrap();
        rx.get_mut().set_spin(Duration::ZERO);
        let mut w = AsyncWriter::new(w).unwrap();
        let killer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            child.kill();
            child
        });
        let err = rx.recv(&mut [0u8; 8]).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
        // A second call ends at once too (no WouldBlock, no spin).
        let err = rx.recv(&mut [0u8; 8]).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
        // The writer: fills the ring, then BrokenPipe.
        let err = loop {
            if let Err(e) = w.write_all(&[0u8; 4096]).await {
                break e;
            }
        };
        assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe);
        assert_eq!(killer.await.unwrap().wait(LIMIT), 128 + libc::SIGKILL);
    });
}
