//! The Zenoh session of a bridge: its configuration from [`Options`], and
//! the check that it is authenticated and encrypted (mutual TLS) unless
//! the insecure choice was made by name.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::BridgeLimits;

/// How long a lost network or a silent peer takes to end the connections
/// it carried: Zenoh's link lease, 3 s (Zenoh's own default is 10 s). A
/// peer's keep-alives come four times a lease; past a lease without any,
/// its session closes, its liveliness tokens go, and each bridge ends the
/// connections of that peer. A killed bridge is seen sooner, when its
/// TCP connection closes.
///
/// # Examples
///
/// ```
/// assert_eq!(shmpipe_bridge::LEASE.as_millis(), 3000);
/// ```
pub const LEASE: Duration = Duration::from_secs(3);

/// How long a new connection waits for the serving bridge's answer: 10 s.
///
/// # Examples
///
/// ```
/// assert_eq!(shmpipe_bridge::OPEN_TIMEOUT.as_secs(), 10);
/// ```
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Mutual TLS: the certificate authority both sides trust, and this
/// side's certificate and private key (PEM files).
///
/// # Examples
///
/// ```
/// let tls = shmpipe_bridge::Tls {
///     ca: "ca.pem".into(),
///     cert: "bridge.pem".into(),
///     key: "bridge-key.pem".into(),
/// };
/// assert_eq!(tls.ca.to_str(), Some("ca.pem"));
/// ```
#[derive(Debug, Clone)]
pub struct Tls {
    /// The CA whose certificates are accepted from peers.
    pub ca: PathBuf,
    /// This bridge's certificate; the serving side's names the address
    /// it is reached at.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// What a bridge's Zenoh session is made of.
///
/// # Examples
///
/// ```
/// let mut options = shmpipe_bridge::Options::default();
/// options.endpoints.push("tcp/127.0.0.1:7447".into());
/// options.insecure = true; // plain TCP: on loopback only
/// options.peers = vec!["alice".into()]; // serve: only certificate `alice`
/// ```
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// A Zenoh configuration file (JSON5); the other options go on top.
    pub config: Option<PathBuf>,
    /// Endpoints to listen on (serve) or connect to (connect), such as
    /// `quic/host:7447`.
    pub endpoints: Vec<String>,
    /// Mutual TLS files, if not in the configuration file.
    pub tls: Option<Tls>,
    /// Accept a session without TLS, on loopback endpoints only.
    pub insecure: bool,
    /// Serving side: the certificate names (common names) that may open
    /// connections, each counted as one peer by the bounds. Zenoh's
    /// access control ties a name to the certificate that proved it, so
    /// a peer cannot count as another or as many. Empty: any certificate
    /// of the CA may open, and a peer is counted by the session id it
    /// sends, which it chooses.
    pub peers: Vec<String>,
    /// The bridge's bounds.
    pub limits: BridgeLimits,
}

/// Which side a session is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Serve,
    Connect,
}

fn bad(text: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("shmpipe bridge: {text}"),
    )
}

fn set(config: &mut zenoh::Config, key: &str, value: serde_json::Value) -> io::Result<()> {
    config
        .insert_json5(key, &value.to_string())
        .map_err(|e| bad(format!("configuration {key}: {e}")))
}

fn get(config: &zenoh::Config, key: &str) -> serde_json::Value {
    config
        .get_json(key)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// The endpoints under `key`: a list, or per mode `{ peer: [...] }`.
fn endpoints(config: &zenoh::Config, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut add = |v: &serde_json::Value| {
        if let Some(list) = v.as_array() {
            out.extend(list.iter().filter_map(|e| e.as_str().map(str::to_owned)));
        }
    };
    match get(config, key) {
        serde_json::Value::Object(by_mode) => by_mode.values().for_each(&mut add),
        v => add(&v),
    }
    out
}

/// The session's configuration, checked: mutual TLS on every endpoint,
/// or `insecure` and loopback only.
pub(crate) fn zenoh_config(options: &Options, role: Role) -> io::Result<zenoh::Config> {
    // Zenoh's own log, as RUST_LOG says (nothing by default).
    zenoh::try_init_log_from_env();
    let (mut config, text) = match &options.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| bad(format!("{}: {e}", path.display())))?;
            let config = zenoh::Config::from_json5(&text)
                .map_err(|e| bad(format!("{}: {e}", path.display())))?;
            (config, text)
        }
        None => (zenoh::Config::default(), String::new()),
    };
    // The file decides what it names; the rest is the bridge's choice.
    let named = |what: &str| text.contains(what);
    if !named("mode") {
        set(&mut config, "mode", "peer".into())?;
    }
    if !named("scouting") {
        // Peers are named, never discovered: nothing answers or goes out
        // on multicast, and a peer is not told about others.
        set(&mut config, "scouting/multicast/enabled", false.into())?;
        set(&mut config, "scouting/gossip/enabled", false.into())?;
    }
    if !named("lease") {
        set(
            &mut config,
            "transport/link/tx/lease",
            (LEASE.as_millis() as u64).into(),
        )?;
    }
    if !named("protocols") {
        let protocols = if options.insecure {
            vec!["quic", "tcp"]
        } else {
            vec!["quic"]
        };
        set(&mut config, "transport/link/protocols", protocols.into())?;
    }
    let (mine, other) = match role {
        Role::Serve => ("listen/endpoints", "connect/endpoints"),
        Role::Connect => ("connect/endpoints", "listen/endpoints"),
    };
    if !options.endpoints.is_empty() {
        set(&mut config, mine, options.endpoints.clone().into())?;
    }
    if !named(other.split('/').next().unwrap_or(other)) {
        // A peer listens by default: the connecting side does not, and
        // the serving side dials nobody.
        set(&mut config, other, serde_json::Value::Array(Vec::new()))?;
    }
    if let Some(tls) = &options.tls {
        let path = |p: &PathBuf| serde_json::Value::from(p.display().to_string());
        set(
            &mut config,
            "transport/link/tls/root_ca_certificate",
            path(&tls.ca),
        )?;
        for side in ["listen", "connect"] {
            set(
                &mut config,
                &format!("transport/link/tls/{side}_certificate"),
                path(&tls.cert),
            )?;
            set(
                &mut config,
                &format!("transport/link/tls/{side}_private_key"),
                path(&tls.key),
            )?;
        }
        set(&mut config, "transport/link/tls/enable_mtls", true.into())?;
    }
    if endpoints(&config, mine).is_empty() {
        let flag = if role == Role::Serve {
            "--listen"
        } else {
            "--connect"
        };
        return Err(bad(format!(
            "no endpoint: give {flag} ENDPOINT or a --config that names one"
        )));
    }
    check(&config, role, options.insecure)?;
    Ok(config)
}

/// Confines every remote peer of a serving bridge's session to opening
/// and carrying its own connections of `key` (Zenoh access control, which
/// replaces any `access_control` of a `--config`).
///
/// Mutual TLS says a peer holds a certificate of the CA, not which
/// connections are its own: without this, a peer could subscribe to
/// `key/**` and read every connection's frames, or put into another's.
/// By default everything is denied; a remote peer may only
///
/// - ask to open: `key/_open`, and `key/_open/NAME` where NAME is the
///   common name of the certificate its link proved, if `peers` lists it
///   (any NAME when `peers` is empty). The reply, the new connection's
///   secret, is routed to the asking peer alone;
/// - put frames to `key/_conn/*/up` and ask `key/_conn/*/down` (replies
///   to it alone), and declare its token `key/_conn/*/client`,
///
/// and this side sends out only its replies and its own wildcard
/// declarations. So no remote peer can subscribe, declare a queryable or
/// a liveliness subscriber, or ask for tokens, on any key: nothing of a
/// connection is routed to a peer that did not open it, and its secret
/// (128 bits, never in a declaration) cannot be learnt. `*` matches any
/// secret in these rules, but a put or a query to them reaches a
/// connection only under its secret (a wildcard names none, and is
/// dropped: `link::secret_in`).
pub(crate) fn confine(config: &mut zenoh::Config, key: &str, peers: &[String]) -> io::Result<()> {
    let ke = zenoh::key_expr::KeyExpr::try_from(key.to_owned())
        .map_err(|e| bad(format!("key {key:?}: {e}")))?;
    if ke.is_wild() {
        return Err(bad(format!(
            "key {key:?} has a wildcard: a service is reachable as one key"
        )));
    }
    if !peers.is_empty() && get(config, "transport/link/tls/enable_mtls") != true {
        return Err(bad(
            "--peer names certificates, and this session has no mutual TLS to prove them".into(),
        ));
    }
    if let Some(p) = peers.iter().find(|p| !is_name(p)) {
        return Err(bad(format!(
            "--peer {p:?}: a name is one Zenoh key chunk (no /, *, $, ?, #, no leading @, not blank)"
        )));
    }
    let conn = |leaf: &str| format!("{key}/_conn/*/{leaf}");
    let rule = |id: &str, messages: &[&str], flow: &str, keys: Vec<String>| {
        serde_json::json!({
            "id": id,
            "messages": messages,
            "flows": [flow],
            "permission": "allow",
            "key_exprs": keys,
        })
    };
    let open = crate::open_key(key);
    let any_open = crate::named_open_key(key, "*");
    // Open requests under any name, unless names are listed: then each
    // name only from the certificate that bears it (below).
    let mut asks = vec![open.clone(), conn("down")];
    if peers.is_empty() {
        asks.push(any_open.clone());
    }
    let mut rules = vec![
        rule("in-frames", &["put"], "ingress", vec![conn("up")]),
        rule("in-asks", &["query"], "ingress", asks),
        rule(
            "in-token",
            &["liveliness_token"],
            "ingress",
            vec![conn("client")],
        ),
        rule(
            "out-replies",
            &["reply"],
            "egress",
            vec![open.clone(), any_open.clone(), conn("down")],
        ),
        rule(
            "out-subscriber",
            &["declare_subscriber"],
            "egress",
            vec![conn("up")],
        ),
        rule(
            "out-queryables",
            &["declare_queryable"],
            "egress",
            vec![open, any_open, conn("down")],
        ),
        rule(
            "out-token-watch",
            &["declare_liveliness_subscriber"],
            "egress",
            vec![conn("client")],
        ),
    ];
    let every: Vec<serde_json::Value> = rules.iter().map(|r| r["id"].clone()).collect();
    // No attribute: every remote peer, whatever its certificate.
    let mut subjects = vec![serde_json::json!({ "id": "every-peer" })];
    let mut policies = vec![serde_json::json!({ "rules": every, "subjects": ["every-peer"] })];
    for (i, name) in peers.iter().enumerate() {
        let (r, who) = (format!("open-as-{i}"), format!("peer-{i}"));
        rules.push(rule(
            &r,
            &["query"],
            "ingress",
            vec![crate::named_open_key(key, name)],
        ));
        subjects.push(serde_json::json!({ "id": who, "cert_common_names": [name] }));
        policies.push(serde_json::json!({ "rules": [r], "subjects": [who] }));
    }
    let acl = serde_json::json!({
        "enabled": true,
        "default_permission": "deny",
        "rules": rules,
        "subjects": subjects,
        "policies": policies,
    });
    set(config, "access_control", acl)
}

/// One chunk of a Zenoh key that `*` matches: what a peer's name may be
/// (a leading `@` makes a verbatim chunk, which no wildcard matches; a
/// blank name is no certificate's).
fn is_name(name: &str) -> bool {
    !name.trim().is_empty() && !name.starts_with('@') && !name.contains(['/', '*', '$', '?', '#'])
}

/// The common name of the certificate this side presents when it
/// connects, as Zenoh reads it at the other end (the first CN), if it
/// has one and it is a key chunk.
pub(crate) fn own_name(config: &zenoh::Config) -> Option<String> {
    let path = get(config, "transport/link/tls/connect_certificate");
    let pem = std::fs::read(path.as_str()?).ok()?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).ok()?;
    let cert = pem.parse_x509().ok()?;
    let name = cert.subject().iter_common_name().next()?.as_str().ok()?;
    is_name(name).then(|| name.to_owned())
}

/// Refuses a session that is not mutual TLS on every endpoint, unless
/// `insecure`, and then only on loopback.
fn check(config: &zenoh::Config, role: Role, insecure: bool) -> io::Result<()> {
    let all: Vec<String> = ["listen/endpoints", "connect/endpoints"]
        .iter()
        .flat_map(|k| endpoints(config, k))
        .collect();
    let tls = |k: &str| !get(config, &format!("transport/link/tls/{k}")).is_null();
    let side = if role == Role::Serve {
        "listen"
    } else {
        "connect"
    };
    let mut missing = Vec::new();
    if get(config, "transport/link/tls/enable_mtls") != serde_json::Value::Bool(true) {
        missing.push("mutual TLS (enable_mtls)".to_owned());
    }
    for k in [
        "root_ca_certificate".to_owned(),
        format!("{side}_certificate"),
        format!("{side}_private_key"),
    ] {
        if !tls(&k) {
            missing.push(k);
        }
    }
    let clear: Vec<&String> = all.iter().filter(|e| !e.starts_with("quic/")).collect();
    if clear.is_empty() && missing.is_empty() {
        return Ok(());
    }
    let why = if missing.is_empty() {
        format!("endpoints other than quic/ (TLS 1.3): {clear:?}")
    } else {
        format!("no {}", missing.join(", "))
    };
    if !insecure {
        return Err(bad(format!(
            "refusing to start unauthenticated ({why}): anyone who reaches the endpoint could \
             call the service and read its replies. Give --tls-ca, --tls-cert and --tls-key \
             (mutual TLS), or a --config with them; --insecure allows plain TCP on loopback only"
        )));
    }
    match all.iter().find(|e| !loopback(e)) {
        Some(e) => Err(bad(format!(
            "--insecure serves loopback only, and {e} is not on loopback ({why})"
        ))),
        None => Ok(()),
    }
}

/// `tcp/127.0.0.1:7447`, `quic/[::1]:7447`, `tcp/localhost:7447`.
fn loopback(endpoint: &str) -> bool {
    let Some((_, rest)) = endpoint.split_once('/') else {
        return false;
    };
    let addr = rest.split(['?', '#']).next().unwrap_or(rest);
    let host = match addr.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => addr,
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .map(|ip| ip.is_loopback())
            .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(endpoint: &str) -> Options {
        Options {
            endpoints: vec![endpoint.into()],
            ..Options::default()
        }
    }

    #[test]
    fn without_tls_a_bridge_refuses_to_start() {
        let e = zenoh_config(&options("quic/127.0.0.1:7447"), Role::Serve).unwrap_err();
        assert!(
            e.to_string().contains("refusing to start unauthenticated"),
            "{e}"
        );
        let e = zenoh_config(&options("tcp/127.0.0.1:7447"), Role::Connect).unwrap_err();
        assert!(e.to_string().contains("--insecure"), "{e}");
    }

    #[test]
    fn insecure_is_loopback_only() {
        let mut o = options("tcp/127.0.0.1:7447");
        o.insecure = true;
        zenoh_config(&o, Role::Serve).expect("loopback");
        o.endpoints = vec!["tcp/[::1]:7447".into()];
        zenoh_config(&o, Role::Connect).expect("loopback");
        o.endpoints = vec!["tcp/10.1.2.3:7447".into()];
        let e = zenoh_config(&o, Role::Serve).unwrap_err();
        assert!(e.to_string().contains("loopback only"), "{e}");
    }

    #[test]
    fn tls_files_make_a_mutual_tls_session() {
        let mut o = options("quic/10.1.2.3:7447");
        o.tls = Some(Tls {
            ca: "ca.pem".into(),
            cert: "c.pem".into(),
            key: "k.pem".into(),
        });
        let c = zenoh_config(&o, Role::Connect).expect("mutual TLS");
        assert_eq!(get(&c, "transport/link/tls/enable_mtls"), true);
        assert_eq!(get(&c, "scouting/multicast/enabled"), false);
        assert!(endpoints(&c, "listen/endpoints").is_empty());
        o.endpoints = vec!["tcp/10.1.2.3:7447".into()];
        assert!(zenoh_config(&o, Role::Connect).is_err(), "a clear endpoint");
    }

    #[test]
    fn names_are_admitted_each_by_its_own_certificate() {
        let mut o = options("quic/10.1.2.3:7447");
        o.insecure = true;
        o.endpoints = vec!["tcp/127.0.0.1:7447".into()];
        let mut c = zenoh_config(&o, Role::Serve).expect("insecure loopback");
        let e = confine(&mut c, "k", &["alice".into()]).unwrap_err();
        assert!(e.to_string().contains("no mutual TLS"), "{e}");
        o.endpoints = vec!["quic/10.1.2.3:7447".into()];
        o.tls = Some(Tls {
            ca: "ca.pem".into(),
            cert: "c.pem".into(),
            key: "k.pem".into(),
        });
        let mut c = zenoh_config(&o, Role::Serve).expect("mutual TLS");
        for bad in ["a/b", "@verbatim", " ", "a*"] {
            let e = confine(&mut c, "k", &[bad.into()]).unwrap_err();
            assert!(
                e.to_string().contains("one Zenoh key chunk"),
                "{bad:?}: {e}"
            );
        }
        confine(&mut c, "k", &["alice".into(), "bob".into()]).expect("names");
        let acl = get(&c, "access_control");
        let asks = &acl["rules"][1];
        assert_eq!(asks["id"], "in-asks");
        assert!(!asks["key_exprs"].to_string().contains("_open/*"), "{asks}");
        let bob = acl["subjects"].as_array().unwrap().last().unwrap();
        assert_eq!(bob["cert_common_names"], serde_json::json!(["bob"]));
        let rule = acl["rules"].as_array().unwrap().last().unwrap();
        assert_eq!(rule["key_exprs"], serde_json::json!(["k/_open/bob"]));
        let mut c = zenoh_config(&o, Role::Serve).unwrap();
        confine(&mut c, "k", &[]).expect("any name");
        let asks = &get(&c, "access_control")["rules"][1];
        assert!(
            asks["key_exprs"].to_string().contains("k/_open/*"),
            "{asks}"
        );
    }
}
