//! The file server across processes: files of awkward sizes byte for
//! byte, escapes from the root refused, 50 clients at once, a client
//! killed mid-read.

mod common;

use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{fork, watchdog};
use shmpipe::fs::{Client, Server};
use shmpipe::rpc::{Transport, UnixTransport};

const LIMIT: Duration = Duration::from_secs(120);

const SIZES: [usize; 7] = [0, 1, 4095, 4096, 4097, 65536, 5 << 20];

fn contents(n: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; n];
    common::fill(&mut v, seed);
    v
}

/// A root with the test files, and a secret beside it.
fn tree(tag: &str) -> PathBuf {
    let base = std::env::temp_dir().join(format!("shmpipe-fs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("root");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    for n in SIZES {
        std::fs::write(root.join(format!("f{n}")), contents(n, n as u64)).unwrap();
    }
    std::fs::write(root.join("sub/inner"), b"inner").unwrap();
    std::fs::write(base.join("secret"), b"secret").unwrap();
    symlink("../secret", root.join("out")).unwrap();
    symlink("/etc/passwd", root.join("abs")).unwrap();
    symlink("sub/inner", root.join("in")).unwrap();
    symlink("/dev", root.join("devdir")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        root.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    root
}

/// Starts a server for `root` on a thread of this process, with the
/// file server's reply rings (`Server::bind`); the clients are other
/// processes.
fn start(root: &Path, tag: &str) -> PathBuf {
    start_with(root, tag, true)
}

/// As `start`; with `big` false, on a listener's default (smaller) rings,
/// so that the clients read ahead less.
fn start_with(root: &Path, tag: &str, big: bool) -> PathBuf {
    let path = common::sock_path(tag);
    let _ = std::fs::remove_file(&path);
    let listener = if big {
        Server::bind(&path).unwrap()
    } else {
        shmpipe::Listener::bind(&path).unwrap()
    };
    let server = Server::new(root).unwrap();
    std::thread::spawn(move || server.serve(listener));
    path
}

fn read_all<T: Transport>(client: &Client<T>, name: &str, chunk: usize) -> Vec<u8> {
    let mut f = client.open(name).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; chunk];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    assert_eq!(out.len() as u64, f.len());
    out
}

#[test]
fn files_byte_for_byte() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = tree("bytes");
    let path = start(&root, "fs-bytes");
    let client = fork({
        move || {
            let c = Client::connect(&path).unwrap();
            for n in SIZES {
                let want = contents(n, n as u64);
                let name = format!("f{n}");
                for chunk in [1, 4096, 4097, 65536, 1 << 20] {
                    if n > (1 << 16) && chunk < 4096 {
                        continue;
                    }
                    assert_eq!(read_all(&c, &name, chunk), want, "{name} in {chunk}s");
                }
                let mut f = c.open(&name).unwrap();
                assert_eq!(f.len(), n as u64);
                assert_eq!(f.size().unwrap(), n as u64);
                // read_at at the edges, and Seek.
                let mut b = [0u8; 100];
                for off in [0, n / 2, n.saturating_sub(1), n, n + 10] {
                    let got = f.read_at(&mut b, off as u64).unwrap();
                    let end = (off + 100).min(n).max(off.min(n));
                    assert_eq!(&b[..got], &want[off.min(n)..end], "{name} at {off}");
                }
                f.seek(SeekFrom::Start((n / 3) as u64)).unwrap();
                let mut rest = Vec::new();
                f.read_to_end(&mut rest).unwrap();
                assert_eq!(rest, &want[n / 3..]);
            }
            // std::io::copy, as `cat` does.
            let mut sink = Vec::new();
            std::io::copy(&mut c.open("f5242880").unwrap(), &mut sink).unwrap();
            assert_eq!(sink, contents(5 << 20, 5 << 20));
            // A symlink that stays inside is followed.
            assert_eq!(read_all(&c, "in", 4096), b"inner");
            assert_eq!(read_all(&c, "sub/inner", 4096), b"inner");
            let mut names = c.list("").unwrap();
            names.sort();
            assert!(names.contains(&"f4097".to_string()) && names.contains(&"sub".to_string()));
            assert_eq!(c.list("sub").unwrap(), ["inner"]);
            0
        }
    });
    client.join();
}

#[test]
fn escapes_are_refused() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = tree("escape");
    // A device inside the root, where we may make one (root in a VM);
    // elsewhere the FIFO and the symlink to /dev stand in.
    let dev = rustix::fs::mknodat(
        rustix::fs::CWD,
        root.join("null"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(1, 3),
    )
    .is_ok();
    if !dev {
        eprintln!("escapes_are_refused: cannot mknod here; the device case is the FIFO and /dev");
    }
    let path = start(&root, "fs-escape");
    let client = fork({
        let path = path.clone();
        move || {
            let c = Client::connect(&path).unwrap();
            let refused = [
                ("../secret", ErrorKind::PermissionDenied),
                ("sub/../../secret", ErrorKind::PermissionDenied),
                ("/etc/passwd", ErrorKind::PermissionDenied),
                ("out", ErrorKind::PermissionDenied),
                ("abs", ErrorKind::PermissionDenied),
                ("devdir/null", ErrorKind::PermissionDenied),
                ("/proc/self/root/etc/passwd", ErrorKind::PermissionDenied),
                ("fifo", ErrorKind::InvalidInput),
                ("sub", ErrorKind::InvalidInput),
                ("missing", ErrorKind::NotFound),
                ("", ErrorKind::InvalidInput),
            ];
            for (name, kind) in refused {
                let e = c.open(name).unwrap_err();
                assert_eq!(e.kind(), kind, "{name}: {e}");
            }
            if dev {
                let e = c.open("null").unwrap_err();
                assert_eq!(e.kind(), ErrorKind::InvalidInput, "device: {e}");
            }
            assert!(c.list("..").is_err());
            assert!(c.list("/").is_err());
            // And after all that, the client is served.
            assert_eq!(read_all(&c, "f4096", 4096), contents(4096, 4096));
            0
        }
    });
    client.join();
}

#[test]
fn too_many_open_files() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = tree("limit");
    let path = start(&root, "fs-limit");
    let client = fork({
        let path = path.clone();
        move || {
            let c = Client::connect(&path).unwrap();
            let files: Vec<_> = (0..shmpipe::fs::MAX_OPEN)
                .map(|_| c.open("f1").unwrap())
                .collect();
            assert!(c.open("f1").is_err());
            drop(files);
            assert_eq!(read_all(&c, "f1", 10), contents(1, 1));
            0
        }
    });
    client.join();
}

#[test]
fn fifty_clients_at_once() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = tree("fifty");
    let path = start(&root, "fs-fifty");
    let clients: Vec<_> = (0..50)
        .map(|i| {
            let path = path.clone();
            fork(move || {
                let c = Client::connect(&path).unwrap();
                let n = SIZES[i % SIZES.len()];
                for _ in 0..3 {
                    assert_eq!(read_all(&c, &format!("f{n}"), 4096), contents(n, n as u64));
                }
                0
            })
        })
        .collect();
    for c in clients {
        c.join();
    }
}

#[test]
fn a_client_killed_mid_read() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = tree("kill");
    let path = start(&root, "fs-kill");
    let (ready_r, ready_w) = rustix::pipe::pipe().unwrap();
    let victim = fork({
        let path = path.clone();
        move || {
            let c = Client::connect(&path).unwrap();
            let mut f = c.open("f5242880").unwrap();
            let mut buf = [0u8; 4096];
            f.read_exact(&mut buf).unwrap();
            rustix::io::write(&ready_w, b"r").unwrap();
            loop {
                if f.read(&mut buf).unwrap() == 0 {
                    f.seek(SeekFrom::Start(0)).unwrap();
                }
            }
        }
    });
    let mut b = [0u8; 1];
    assert_eq!(rustix::io::read(&ready_r, &mut b).unwrap(), 1);
    victim.kill();
    assert_eq!(victim.wait(LIMIT), 128 + 9);
    let after = fork(move || {
        let c = Client::connect(&path).unwrap();
        assert_eq!(read_all(&c, "f5242880", 4096), contents(5 << 20, 5 << 20));
        0
    });
    after.join();
}

/// Iozone's reread: back to 0 after the end, again and again (the
/// read-ahead goes round the file, many times over for a small one), with
/// another file, a `read_at` and a seek into the middle in between; every
/// pass byte for byte. With the file server's reply rings and with a
/// listener's default ones (a smaller read-ahead window).
#[test]
fn rereads_byte_for_byte() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = tree("reread");
    for big in [true, false] {
        rereads(start_with(&root, &format!("fs-reread-{big}"), big));
    }
}

fn rereads(path: PathBuf) {
    let client = fork(move || {
        reread_checks(&Client::connect(&path).unwrap());
        0
    });
    client.join();
}

/// The same over a Unix socket (`unix-fileserver` in the bench): its
/// read-ahead is kept full rather than refilled in batches.
#[test]
fn rereads_over_a_unix_socket() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = tree("reread-unix");
    let path = common::sock_path("fs-reread-unix");
    let _ = std::fs::remove_file(&path);
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let server = Server::new(&root).unwrap();
    std::thread::spawn(move || server.serve_unix(listener));
    let client = fork(move || {
        reread_checks(&Client::with_transport(UnixTransport::connect(&path).unwrap()).unwrap());
        0
    });
    client.join();
}

fn reread_checks<T: Transport>(c: &Client<T>) {
    for n in [1usize, 4095, 4096, 4097, 65536, 5 << 20] {
        let want = contents(n, n as u64);
        let mut f = c.open(&format!("f{n}")).unwrap();
        let mut buf = vec![0u8; 4096];
        for pass in 0..4 {
            f.seek(SeekFrom::Start(0)).unwrap();
            let mut got = Vec::new();
            loop {
                let k = f.read(&mut buf).unwrap();
                if k == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..k]);
            }
            assert!(got == want, "f{n} pass {pass}");
            if pass == 1 {
                let mut b = [0u8; 10];
                let k = f.read_at(&mut b, 1).unwrap();
                assert_eq!(&b[..k], &want[1.min(n)..11.min(n)]);
                assert_eq!(read_all(c, "f4096", 4096), contents(4096, 4096));
            }
        }
        f.seek(SeekFrom::Start(0)).unwrap();
        f.seek(SeekFrom::Start((n / 2) as u64)).unwrap();
        let mut rest = Vec::new();
        f.read_to_end(&mut rest).unwrap();
        assert!(rest == want[n / 2..], "f{n} from the middle");
    }
}

/// Resident memory of process `pid`, in MiB.
fn rss_mib(pid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    (pages * 4096) >> 20
}

/// Once the shared cache is full, a file that does not fit is served with
/// `pread`: the server reads no private copy of it per open handle (one
/// client could otherwise pin MAX_OPEN x CACHE_FILE_MAX bytes). Four
/// handles of a 64 MiB file grow the server by far less than one copy.
#[test]
fn a_file_past_the_full_cache_is_not_copied_per_handle() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = std::env::temp_dir().join(format!("shmpipe-fs-full-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    for i in 0..9 {
        // Sparse: no disk, reads as zeros.
        let f = std::fs::File::create(root.join(format!("f{i}"))).unwrap();
        f.set_len(64 << 20).unwrap();
    }
    let path = common::sock_path("fs-full");
    let _ = std::fs::remove_file(&path);
    let server = fork({
        let (root, path) = (root.clone(), path.clone());
        move || {
            let listener = shmpipe::Listener::bind(&path).unwrap();
            let _ = Server::new(&root).unwrap().serve(listener);
            1
        }
    });
    while !path.exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let client = Client::connect(&path).unwrap();
    for i in 0..8 {
        drop(client.open(&format!("f{i}")).unwrap()); // fills the cache: 512 MiB
    }
    let before = rss_mib(server.pid());
    let mut held: Vec<_> = (0..4).map(|_| client.open("f8").unwrap()).collect();
    for f in &mut held {
        assert_eq!(f.len(), 64 << 20);
        let mut buf = [1u8; 4096];
        f.read_exact(&mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "served with pread, correctly");
    }
    let grown = rss_mib(server.pid()) - before;
    drop(held);
    drop(client);
    drop(server);
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_file(&path);
    assert!(
        grown < 32,
        "4 handles of one 64 MiB file cost the server {grown} MiB"
    );
}

/// Seeks while replies read ahead are in flight or half read: back inside
/// the reply being read, forward past it, to the end and back; and two
/// files read in turns (each turn ends the other's read-ahead). Every
/// byte checked.
#[test]
fn seeks_during_read_ahead() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = tree("seek");
    let path = start(&root, "fs-seek");
    let client = fork(move || {
        let c = Client::connect(&path).unwrap();
        let n = 5usize << 20;
        let want = contents(n, n as u64);
        let mut f = c.open("f5242880").unwrap();
        let mut buf = vec![0u8; 4096];
        let mut at = |f: &mut shmpipe::fs::File, pos: usize| {
            f.seek(SeekFrom::Start(pos as u64)).unwrap();
            f.read_exact(&mut buf).unwrap();
            assert!(buf[..] == want[pos..pos + 4096], "at {pos}");
        };
        at(&mut f, 0);
        at(&mut f, 100); // back inside the reply being read
        at(&mut f, 70_000); // into the next one
        at(&mut f, 3 << 20); // far ahead
        at(&mut f, n - 4096); // the last record
        at(&mut f, 1); // back to the start, unaligned
        assert_eq!(f.seek(SeekFrom::End(0)).unwrap(), n as u64);
        assert_eq!(f.read(&mut buf).unwrap(), 0);
        f.seek(SeekFrom::Current(-5000)).unwrap();
        let mut tail = Vec::new();
        f.read_to_end(&mut tail).unwrap();
        assert!(tail[..] == want[n - 5000..]);
        // Two files in turns, record by record.
        let small = contents(65536, 65536);
        let mut g = c.open("f65536").unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        let (mut got_f, mut got_g) = (Vec::new(), Vec::new());
        for _ in 0..64 {
            let k = f.read(&mut buf).unwrap();
            got_f.extend_from_slice(&buf[..k]);
            let k = g.read(&mut buf).unwrap();
            got_g.extend_from_slice(&buf[..k]);
        }
        assert!(got_f[..] == want[..got_f.len()]);
        assert!(got_g == small);
        0
    });
    client.join();
}

/// A client speaking the interface by hand: a `read_chunk` too short for
/// its prefix, a bad handle, reads past the end; each an error or a short
/// count, and the connection still serves.
#[test]
fn malformed_read_chunks_are_refused() {
    use shmpipe::fs::{chunk_prefix, FileServiceClient, FsError, CHUNK_PREFIX};
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = tree("chunk");
    let path = start(&root, "fs-chunk");
    let client = fork(move || {
        let c = FileServiceClient::connect(&path).unwrap();
        let info = c.open("f4097").unwrap().unwrap();
        let mut short = [0u8; 4];
        assert_eq!(
            c.read_chunk(info.handle, 0, &mut short).unwrap(),
            Err(FsError::BadRequest)
        );
        let mut buf = vec![0u8; CHUNK_PREFIX + 8192];
        assert_eq!(
            c.read_chunk(info.handle + 1, 0, &mut buf).unwrap(),
            Err(FsError::BadHandle)
        );
        let p: [u8; CHUNK_PREFIX] = buf[..CHUNK_PREFIX].try_into().unwrap();
        assert_eq!(chunk_prefix(&p), (0, FsError::BadHandle as u32));
        assert_eq!(c.read_chunk(info.handle, 4000, &mut buf).unwrap(), Ok(97));
        let p: [u8; CHUNK_PREFIX] = buf[..CHUNK_PREFIX].try_into().unwrap();
        assert_eq!(chunk_prefix(&p), (97, 0));
        assert!(buf[CHUNK_PREFIX..CHUNK_PREFIX + 97] == contents(4097, 4097)[4000..]);
        assert_eq!(c.read_chunk(info.handle, 1 << 40, &mut buf).unwrap(), Ok(0));
        assert_eq!(c.size(info.handle).unwrap(), Ok(4097));
        0
    });
    client.join();
}

#[test]
fn a_dotdot_that_stays_inside_the_root_is_served() {
    // `..` is refused only where it climbs above the root; inside, the
    // kernel resolves it beneath the root like any other component.
    use shmpipe::fs::{FileService, FsError};
    let root = tree("dotdot");
    let session = Server::new(&root).unwrap().session();
    for name in ["sub/../f4096", "./sub/../f4096", "sub/./../sub/../f4096"] {
        let info = session.open(name);
        assert!(info.is_ok(), "{name}: {info:?}");
    }
    assert!(session.open("sub/../sub/inner").is_ok());
    for name in [
        "..",
        "../secret",
        "sub/../../secret",
        "sub/../../root/f4096",
    ] {
        assert_eq!(session.open(name), Err(FsError::Denied), "{name}");
    }
    // The root itself, reached by `..`: not a regular file.
    assert_eq!(session.open("sub/.."), Err(FsError::NotRegular));
    let _ = std::fs::remove_dir_all(root.parent().unwrap());
}
