//! The file server across processes: files of awkward sizes byte for
//! byte, escapes from the root refused, 50 clients at once, a client
//! killed mid-read; and against hostile clients: bounds on open files
//! per process and per user, a cache that no restored mtime or reused
//! inode fools, `list` in bounded pages.

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

/// Reads one little report (a `u64`) a child writes to `r`.
fn report(r: &std::os::fd::OwnedFd) -> u64 {
    let mut b = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        let n = rustix::io::read(r, &mut b[got..]).unwrap();
        assert!(n > 0, "the child died before it reported");
        got += n;
    }
    u64::from_ne_bytes(b)
}

/// An attacker's loop: `conns` connections, each opening `name` until
/// the server refuses; writes how many it holds to `w`, then holds them
/// (the test kills it). Exits 2 if a refusal is not the one `want` names.
fn hold_all_opens(path: &Path, conns: usize, want: &str, w: std::os::fd::OwnedFd) -> i32 {
    let clients: Vec<_> = (0..conns).map(|_| Client::connect(path).unwrap()).collect();
    let mut files = Vec::new();
    let mut refusals = Vec::new();
    for c in &clients {
        loop {
            match c.open("f1") {
                Ok(f) => files.push(f),
                Err(e) => {
                    refusals.push(e);
                    break;
                }
            }
        }
    }
    // Only the last refusal must name the bound this process hits; the
    // earlier ones may be its connections' own.
    let last = refusals.last().unwrap();
    if last.kind() != ErrorKind::QuotaExceeded || !last.to_string().contains(want) {
        eprintln!(
            "attacker: refused with {last} (kind {:?}), not {want}",
            last.kind()
        );
        return 2;
    }
    rustix::io::write(&w, &(files.len() as u64).to_ne_bytes()).unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A victim: connects anew, opens `n` files at once and reads them.
fn victim_opens(path: &Path, n: usize) -> i32 {
    let c = Client::connect(path).unwrap();
    let files: Vec<_> = (0..n).map(|_| c.open("f4097").unwrap()).collect();
    for _ in &files {
        assert_eq!(read_all(&c, "f4097", 4096), contents(4097, 4097));
    }
    0
}

/// One client process cannot take the server's descriptors: its opens
/// over all its connections stop at the default per-process bound (a
/// quarter of half the descriptor limit) with an error that says so,
/// while a victim (another process) connects and opens files. Before,
/// 256 a connection and no total: four connections filled all 512.
#[test]
fn one_process_cannot_take_the_file_servers_descriptors() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = tree("fds");
    let path = common::sock_path("fs-fds");
    let _ = std::fs::remove_file(&path);
    const FDS: u64 = 512;
    let server = fork({
        let (root, path) = (root.clone(), path.clone());
        move || {
            let lim = rustix::process::Rlimit {
                current: Some(FDS),
                maximum: Some(FDS),
            };
            rustix::process::setrlimit(rustix::process::Resource::Nofile, lim).unwrap();
            let server = Server::new(&root).unwrap();
            assert_eq!(
                server.open_limits(),
                shmpipe::fs::OpenLimits::for_descriptor_limit(FDS)
            );
            let _ = server.serve(Server::bind(&path).unwrap());
            1
        }
    });
    while !path.exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let per_process = shmpipe::fs::OpenLimits::for_descriptor_limit(FDS).per_process;
    let (r, w) = rustix::pipe::pipe().unwrap();
    let attacker = fork({
        let path = path.clone();
        move || hold_all_opens(&path, 4, "limit per client process", w)
    });
    assert_eq!(
        report(&r) as usize,
        per_process,
        "the attacker holds its bound"
    );
    let victim = fork({
        let path = path.clone();
        move || victim_opens(&path, 32)
    });
    assert_eq!(
        victim.wait(LIMIT),
        0,
        "the victim is served beside the attacker"
    );
    drop(attacker);
    drop(server);
}

/// One user cannot take the server's descriptors either: three processes
/// of one uid stop at the per-user bound (their last open refused as
/// "per user"), and a process of another uid still opens; once they
/// are gone, every place is free again. Runs as root (to change uid),
/// with the server's limits set small.
#[test]
fn one_user_cannot_take_the_file_servers_descriptors() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!(
            "one_user_cannot_take_the_file_servers_descriptors: SKIPPED, needs root to change uid"
        );
        return;
    }
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = tree("uids");
    let path = common::sock_path("fs-uids");
    let _ = std::fs::remove_file(&path);
    let limits = shmpipe::fs::OpenLimits {
        total: 64,
        per_user: 24,
        per_process: 10,
        per_connection: 4,
    };
    let mut listener = Server::bind(&path).unwrap();
    listener.set_policy(|_| true);
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let server = Server::new(&root).unwrap();
    server.set_open_limits(limits);
    std::thread::spawn({
        let server = server.clone();
        move || server.serve(listener)
    });
    let as_uid = |uid: u32| {
        // SAFETY: setgid/setuid in a single-threaded child.
        assert!(unsafe { libc::setgid(uid) } == 0 && unsafe { libc::setuid(uid) } == 0);
    };
    let mut attackers = Vec::new();
    for (i, (held, want)) in [
        (10, "per client process"),
        (10, "per client process"),
        (4, "per user"),
    ]
    .into_iter()
    .enumerate()
    {
        let (r, w) = rustix::pipe::pipe().unwrap();
        attackers.push(fork({
            let path = path.clone();
            move || {
                as_uid(4242);
                hold_all_opens(&path, 3, want, w)
            }
        }));
        assert_eq!(report(&r), held, "attacker {i}");
    }
    assert_eq!(server.open_files(), limits.per_user);
    let victim = fork({
        let path = path.clone();
        move || {
            as_uid(4243);
            victim_opens(&path, 3)
        }
    });
    assert_eq!(victim.wait(LIMIT), 0, "a victim of another uid is served");
    // Places come back when their clients go (the watchdog ends a wait
    // for ever).
    drop(attackers);
    while server.open_files() != 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reads `name` whole through a new client in another process; the bytes
/// come back through a pipe.
fn read_in_child(path: &Path, name: &str) -> Vec<u8> {
    let (r, w) = rustix::pipe::pipe().unwrap();
    let child = fork({
        let (path, name) = (path.to_path_buf(), name.to_string());
        move || {
            let c = Client::connect(&path).unwrap();
            let data = read_all(&c, &name, 4096);
            rustix::io::write(&w, &(data.len() as u64).to_ne_bytes()).unwrap();
            rustix::io::write(&w, &data).unwrap();
            0
        }
    });
    let n = report(&r) as usize;
    let mut data = vec![0u8; n];
    let mut got = 0;
    while got < n {
        got += rustix::io::read(&r, &mut data[got..]).unwrap();
    }
    child.join();
    data
}

/// Waits until a copy of a file written now would be trusted by the
/// cache (its change time more than two seconds old), so that what the
/// test shows is the stamp check, not the "just changed" one.
fn settle() {
    std::thread::sleep(Duration::from_millis(2100));
}

/// A same-size rewrite whose old mtime is put back (`touch -r`, `cp -p`)
/// is served anew: the cache checks the change time, which no user sets.
/// Both with the cached copy settled, and with the rewrite in the same
/// clock tick as the copy (read again, as git does with "racily clean"
/// entries).
#[test]
fn a_rewrite_with_its_old_mtime_is_not_served_stale() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = tree("stale");
    let path = start(&root, "fs-stale");
    let file = root.join("notes.txt");
    for (round, settled) in [(0u8, true), (1, false)] {
        std::fs::write(&file, [b'A' + round; 64]).unwrap();
        let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
        if settled {
            settle();
        }
        assert_eq!(read_in_child(&path, "notes.txt"), [b'A' + round; 64]);
        std::fs::write(&file, [b'a' + round; 64]).unwrap();
        let f = std::fs::File::options().write(true).open(&file).unwrap();
        f.set_modified(mtime).unwrap();
        drop(f);
        assert_eq!(std::fs::metadata(&file).unwrap().modified().unwrap(), mtime);
        assert_eq!(
            read_in_child(&path, "notes.txt"),
            [b'a' + round; 64],
            "settled: {settled}"
        );
    }
}

/// A deleted file's data is never served under another name: delete
/// `secret.txt` (cached), make `new-public.txt` until it gets the same
/// inode number (ext4 gives the lowest free number of the group again,
/// once it is a few seconds past its deletion), of the same size, with
/// the secret's mtime: a client reads the new file's bytes.
#[test]
fn a_reused_inode_does_not_serve_the_deleted_files_data() {
    use std::os::unix::fs::MetadataExt;
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = tree("reuse");
    let path = start(&root, "fs-reuse");
    let secret = root.join("secret.txt");
    std::fs::write(&secret, b"SECRET-1234").unwrap();
    let old = std::fs::metadata(&secret).unwrap();
    settle();
    assert_eq!(read_in_child(&path, "secret.txt"), b"SECRET-1234");
    std::fs::remove_file(&secret).unwrap();
    let public = root.join("new-public.txt");
    let aside = root.join("aside");
    std::fs::create_dir(&aside).unwrap();
    let mut reused = false;
    for i in 0..600 {
        std::fs::write(&public, b"PUBLIC-5678").unwrap();
        if std::fs::metadata(&public).unwrap().ino() == old.ino() {
            reused = true;
            break;
        }
        // Kept, so that the next file does not get this number again.
        std::fs::rename(&public, aside.join(format!("{i}"))).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    if !reused {
        eprintln!(
            "a_reused_inode_does_not_serve_the_deleted_files_data: SKIPPED, {} gave out no inode number again",
            root.display()
        );
        return;
    }
    let f = std::fs::File::options().write(true).open(&public).unwrap();
    f.set_modified(old.modified().unwrap()).unwrap();
    drop(f);
    assert_eq!(read_in_child(&path, "new-public.txt"), b"PUBLIC-5678");
}

/// `list` of a huge directory reads a bounded page per request: one
/// request reads at most `LIST_PAGE` entries (counted by the server) and
/// returns a cursor for the next, `Client::list` still returns every
/// name, and a victim process is answered while an attacker loops `list`
/// over the directory on the one-thread server. Before, one request read
/// (and sorted) all 20,000.
#[test]
fn a_huge_directory_is_listed_a_bounded_page_per_request() {
    use shmpipe::fs::{FileServiceClient, LIST_PAGE};
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let root = tree("huge");
    const N: usize = 20_000;
    std::fs::create_dir(root.join("big")).unwrap();
    for i in 0..N {
        std::fs::File::create(root.join(format!("big/entry-{i:05}"))).unwrap();
    }
    let path = common::sock_path("fs-huge");
    let _ = std::fs::remove_file(&path);
    let server = Server::new(&root).unwrap();
    let listener = Server::bind(&path).unwrap();
    std::thread::spawn({
        let server = server.clone();
        move || server.serve(listener)
    });

    // One request, no one else asking: one page.
    let stub = FileServiceClient::connect(&path).unwrap();
    let before = server.dir_entries_read();
    let page = stub.list("big", 0).unwrap().unwrap();
    let read = server.dir_entries_read() - before;
    assert!(
        read as usize <= LIST_PAGE,
        "one request read {read} entries"
    );
    let (next, names) = page.split_once('\n').unwrap();
    assert_ne!(next, "0", "a page, not the whole directory");
    assert!(names.lines().count() <= LIST_PAGE);

    // The pages, in turn, are the whole directory, each entry read once.
    let before = server.dir_entries_read();
    let names = Client::connect(&path).unwrap().list("big").unwrap();
    let want: Vec<String> = (0..N).map(|i| format!("entry-{i:05}")).collect();
    assert_eq!(names, want);
    assert_eq!(server.dir_entries_read() - before, N as u64 + 2); // "." and ".."

    // An attacker loops list; a victim is answered meanwhile, every time.
    let (r, w) = rustix::pipe::pipe().unwrap();
    let attacker = fork({
        let path = path.clone();
        move || {
            let c = Client::connect(&path).unwrap();
            assert_eq!(c.list("big").unwrap().len(), N);
            rustix::io::write(&w, &1u64.to_ne_bytes()).unwrap();
            loop {
                assert_eq!(c.list("big").unwrap().len(), N);
            }
        }
    });
    assert_eq!(report(&r), 1);
    let victim = fork({
        let path = path.clone();
        move || {
            let c = Client::connect(&path).unwrap();
            for _ in 0..200 {
                assert_eq!(read_all(&c, "f4097", 4096), contents(4097, 4097));
                assert_eq!(c.list("sub").unwrap(), ["inner"]);
            }
            0
        }
    });
    assert_eq!(
        victim.wait(LIMIT),
        0,
        "the victim is served beside the attacker"
    );
    drop(attacker);
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
