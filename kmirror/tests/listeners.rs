//! Several listeners on one broker, over real sockets: each client is told the endpoint of
//! the listener it came in through (Metadata, FindCoordinator, DescribeCluster), TLS
//! listeners speak TLS (mutual when a client CA is set), and a SASL listener serves nothing
//! but ApiVersions before authentication.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kmirror::node::{RunningBroker, ServerConfig};
use kmirror_engine::EngineConfig;
use kmirror_net::listeners::parse_listeners;
use kmirror_net::TlsFiles;
use kmirror_tests::pki::{Identity, TestPki};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

fn start(dir: &std::path::Path, listeners: &str, tls: TlsFiles) -> RunningBroker {
    kmirror::node::start(
        ServerConfig {
            listeners: parse_listeners(listeners).unwrap(),
            tls,
            sasl: Default::default(),
            groups: Default::default(),
            authz: Default::default(),
            node_id: 1,
            data_dir: dir.to_path_buf(),
            max_request_bytes: 1 << 20,
            auto_create_topics: true,
            default_partitions: 1,
            engine: EngineConfig {
                cores: 2,
                pin: false,
                ..EngineConfig::default()
            },
        },
        None,
    )
    .expect("broker starts")
}

fn call<S: Read + Write, Req: Encodable, Resp: Decodable>(
    s: &mut S,
    key: ApiKey,
    version: i16,
    req: &Req,
) -> std::io::Result<Resp> {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("listeners-test")))
        .encode(&mut buf, key.request_header_version(version))
        .unwrap();
    req.encode(&mut buf, version).unwrap();
    let mut frame = (buf.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&buf);
    s.write_all(&frame)?;
    s.flush()?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut body)?;
    let mut b = Bytes::from(body);
    let h = ResponseHeader::decode(&mut b, key.response_header_version(version)).unwrap();
    assert_eq!(h.correlation_id, 7);
    Ok(Resp::decode(&mut b, version).unwrap())
}

fn tcp(addr: std::net::SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn tls(addr: std::net::SocketAddr, ca: &std::path::Path, id: Option<&Identity>) -> Tls {
    tls_with(
        addr,
        ca,
        id,
        &[&rustls::version::TLS13, &rustls::version::TLS12],
    )
}

fn tls_with(
    addr: std::net::SocketAddr,
    ca: &std::path::Path,
    id: Option<&Identity>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Tls {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    let cfg = match id {
        Some(id) => b
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(&id.cert)
                    .unwrap()
                    .map(|c| c.unwrap())
                    .collect(),
                PrivateKeyDer::from_pem_file(&id.key).unwrap(),
            )
            .unwrap(),
        None => b.with_no_client_auth(),
    };
    let conn = rustls::ClientConnection::new(
        Arc::new(cfg),
        ServerName::try_from("localhost").unwrap().to_owned(),
    )
    .unwrap();
    rustls::StreamOwned::new(conn, tcp(addr))
}

/// Metadata, FindCoordinator (v3 and v4) and DescribeCluster all name `port`.
fn advertised_port<S: Read + Write>(s: &mut S) -> Vec<i32> {
    let md: MetadataResponse = call(s, ApiKey::Metadata, 12, &MetadataRequest::default()).unwrap();
    let fc3: FindCoordinatorResponse = call(
        s,
        ApiKey::FindCoordinator,
        3,
        &FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("g")),
    )
    .unwrap();
    let fc4: FindCoordinatorResponse = call(
        s,
        ApiKey::FindCoordinator,
        4,
        &FindCoordinatorRequest::default()
            .with_coordinator_keys(vec![StrBytes::from_static_str("g")]),
    )
    .unwrap();
    let dc: DescribeClusterResponse = call(
        s,
        ApiKey::DescribeCluster,
        0,
        &DescribeClusterRequest::default().with_endpoint_type(1),
    )
    .unwrap();
    assert_eq!(&*md.brokers[0].host, "127.0.0.1");
    assert_eq!(&*fc4.coordinators[0].host, "127.0.0.1");
    vec![
        md.brokers[0].port,
        fc3.port,
        fc4.coordinators[0].port,
        dc.brokers[0].port,
    ]
}

#[test]
fn each_listener_advertises_its_own_endpoint_and_tls_listeners_speak_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new();
    let server = pki.server("broker");
    let b = start(
        dir.path(),
        "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        TlsFiles {
            cert: Some(server.cert.clone()),
            key: Some(server.key.clone()),
            client_ca: None,
        },
    );
    let l = b.listeners().to_vec();
    assert_eq!(
        l.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
        ["PLAINTEXT", "SSL"]
    );
    assert_ne!(l[0].port, l[1].port);
    assert_eq!(b.addr(), l[0].addr);
    assert_eq!(advertised_port(&mut tcp(l[0].addr)), vec![l[0].port; 4]);
    assert_eq!(
        advertised_port(&mut tls(l[1].addr, &pki.ca_pem, None)),
        vec![l[1].port; 4]
    );
    // TLS 1.2 and TLS 1.3 both.
    for v in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let mut s = tls_with(l[1].addr, &pki.ca_pem, None, &[v]);
        assert_eq!(advertised_port(&mut s)[0], l[1].port);
        assert_eq!(s.conn.protocol_version(), Some(v.version));
    }
    // Plain Kafka bytes to the TLS port: the handshake fails, that connection closes, the
    // broker keeps serving both listeners.
    let mut s = tcp(l[1].addr);
    let r: std::io::Result<ApiVersionsResponse> = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    );
    assert!(r.is_err(), "plaintext request on the SSL port answered");
    assert_eq!(advertised_port(&mut tcp(l[0].addr))[0], l[0].port);
    assert_eq!(
        advertised_port(&mut tls(l[1].addr, &pki.ca_pem, None))[0],
        l[1].port
    );
    // A client that does not trust the server's CA gives up at the handshake.
    let other = TestPki::named("other");
    let r: std::io::Result<MetadataResponse> = call(
        &mut tls(l[1].addr, &other.ca_pem, None),
        ApiKey::Metadata,
        12,
        &MetadataRequest::default(),
    );
    assert!(r.is_err());
    b.stop();
}

#[test]
fn mutual_tls_requires_a_client_certificate_from_the_client_ca() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new();
    let other = TestPki::named("other");
    let server = pki.server("broker");
    let b = start(
        dir.path(),
        "SSL://127.0.0.1:0",
        TlsFiles {
            cert: Some(server.cert.clone()),
            key: Some(server.key.clone()),
            client_ca: Some(pki.ca_pem.clone()),
        },
    );
    let addr = b.addr();
    let alice = pki.client("alice", &[("CN", "alice")]);
    let md: MetadataResponse = call(
        &mut tls(addr, &pki.ca_pem, Some(&alice)),
        ApiKey::Metadata,
        12,
        &MetadataRequest::default(),
    )
    .unwrap();
    assert_eq!(md.brokers[0].port, addr.port() as i32);
    let mallory = other.client("mallory", &[("CN", "alice")]);
    for id in [None, Some(&mallory)] {
        let r: std::io::Result<MetadataResponse> = call(
            &mut tls(addr, &pki.ca_pem, id),
            ApiKey::Metadata,
            12,
            &MetadataRequest::default(),
        );
        assert!(r.is_err(), "a client without a trusted cert was served");
    }
    b.stop();
}

#[test]
fn a_tls_listener_without_certificate_or_key_is_a_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let e = kmirror::node::start(
        ServerConfig {
            listeners: parse_listeners("SASL_SSL://127.0.0.1:0").unwrap(),
            tls: TlsFiles::default(),
            sasl: Default::default(),
            groups: Default::default(),
            authz: Default::default(),
            node_id: 1,
            data_dir: dir.path().to_path_buf(),
            max_request_bytes: 1 << 20,
            auto_create_topics: true,
            default_partitions: 1,
            engine: EngineConfig {
                cores: 1,
                pin: false,
                ..EngineConfig::default()
            },
        },
        None,
    )
    .err()
    .expect("refused");
    let e = e.to_string();
    assert!(e.contains("SASL_SSL") && e.contains("tls_cert"), "{e}");
    let e = TlsFiles {
        cert: Some(dir.path().join("missing.pem")),
        key: Some(dir.path().join("missing-key.pem")),
        client_ca: None,
    };
    let e = kmirror_net::tls::server_config(&e).unwrap_err().to_string();
    assert!(e.contains("missing.pem"), "{e}");
}

#[test]
fn a_sasl_listener_serves_only_api_versions_before_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(
        dir.path(),
        "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        TlsFiles::default(),
    );
    let sasl = b.listeners()[1].addr;
    let mut s = tcp(sasl);
    let v: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .unwrap();
    assert_eq!(v.error_code, 0);
    let r: std::io::Result<MetadataResponse> =
        call(&mut s, ApiKey::Metadata, 12, &MetadataRequest::default());
    assert!(r.is_err(), "Metadata served before SASL authentication");
    // The PLAINTEXT listener is unaffected.
    assert_eq!(
        advertised_port(&mut tcp(b.addr()))[0],
        b.addr().port() as i32
    );
    b.stop();
}
