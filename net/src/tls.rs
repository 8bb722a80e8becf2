//! TLS for the SSL and SASL_SSL listeners: rustls (ring provider) over glommio streams, and
//! the principal of a client certificate as Kafka names it.
//!
//! The server reads PEM files: a certificate chain, its PKCS#8 private key and, for mutual
//! TLS, the CAs whose client certificates are accepted. With a client CA configured every
//! TLS listener requires a client certificate (Kafka's `ssl.client.auth=required`); the
//! handshake fails for a client without one or with one from another CA. TLS 1.2 and 1.3.
//!
//! Kafka's default principal for an authenticated TLS client is `User:<subject DN>`, the DN
//! as Java's `X500Principal.getName()` prints it (RFC 2253): most specific RDN first, the
//! RFC 2253 keywords (CN, C, L, ST, O, OU, STREET, DC, UID) and dotted OIDs with a `#`-hex
//! DER value for every other attribute type, and Java's escaping. [`rfc2253`] reproduces it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

/// The PEM files of the TLS listeners; `None` = not configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate chain (leaf first).
    pub cert: Option<PathBuf>,
    /// The server's private key (PKCS#8; PKCS#1 and SEC1 are accepted too).
    pub key: Option<PathBuf>,
    /// CA certificates that sign accepted client certificates: set = mutual TLS required on SSL
    /// listeners (SASL_SSL listeners never ask for a certificate).
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    pub fn mutual(&self) -> bool {
        self.client_ca.is_some()
    }
}

/// What is wrong with a TLS listener's files, or a client's certificate.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("a TLS listener (SSL or SASL_SSL) needs tls_cert and tls_key (--tls-cert, --tls-key)")]
    MissingFiles,
    /// `what` is the setting (tls_cert, tls_key, tls_client_ca) naming `path`.
    #[error("{what} {}: {reason}", path.display())]
    File {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("TLS protocol versions: {0}")]
    Versions(String),
    #[error("tls_cert/tls_key do not make a usable identity: {0}")]
    Identity(String),
    #[error("unparsable client certificate: {0}")]
    ClientCertificate(String),
}

/// Builds the rustls server configuration. Errors name the file and what is wrong with it.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let (Some(cert), Some(key)) = (&files.cert, &files.key) else {
        return Err(TlsError::MissingFiles);
    };
    let file = |what, path: &Path, reason: String| TlsError::File {
        what,
        path: path.to_owned(),
        reason,
    };
    let certs = read_certs(cert, "tls_cert")?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| file("tls_key", key, format!("no usable PEM private key ({e})")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Versions(e.to_string()))?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in read_certs(ca, "tls_client_ca")? {
                roots
                    .add(c)
                    .map_err(|e| file("tls_client_ca", ca, e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| file("tls_client_ca", ca, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let cfg = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Identity(e.to_string()))?;
    Ok(Arc::new(cfg))
}

fn read_certs(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file = |reason: String| TlsError::File {
        what,
        path: path.to_owned(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| file(e.to_string()))?;
    if certs.is_empty() {
        return Err(file("no PEM certificate in the file".into()));
    }
    Ok(certs)
}

/// Kafka's principal name for a verified client certificate (DER): its subject DN per
/// [`rfc2253`].
pub fn principal_name(cert_der: &[u8]) -> Result<String, TlsError> {
    let (_, cert) = X509Certificate::from_der(cert_der)
        .map_err(|e| TlsError::ClientCertificate(e.to_string()))?;
    Ok(rfc2253(cert.subject()))
}

/// A DN as Java's `X500Principal.getName()` (RFC 2253 format) prints it: RDNs in reverse
/// order of their encoding, `+` between the attributes of a multi-valued RDN (in encoded
/// order), RFC 2253 keywords or dotted OIDs, string values escaped as Java escapes them,
/// other values (and every value of an attribute named by OID) as `#` and the hex of its DER
/// encoding.
pub fn rfc2253(name: &X509Name<'_>) -> String {
    let rdns: Vec<String> = name
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| {
                    let oid = atv.attr_type().to_id_string();
                    let value = atv.attr_value();
                    match (keyword(&oid), string_value(value)) {
                        (Some(k), Some(s)) => format!("{k}={}", escape(&s)),
                        (k, _) => format!("{}=#{}", k.unwrap_or(&oid), hex(&der_encoding(value))),
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// The keywords Java prints in RFC 2253 form; every other attribute type is a dotted OID.
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// The text of a value as Java prints it: the string types Java 17 treats as text
/// (PrintableString, TeletexString, IA5String, GeneralString, UTF8String, BMPString), their
/// content bytes read as UTF-8 (a BMPString too, as Java does); `None` = print as hex.
fn string_value(v: &x509_parser::der_parser::asn1_rs::Any<'_>) -> Option<String> {
    use x509_parser::der_parser::asn1_rs::{Class, Tag};
    if v.header.class() != Class::Universal || v.header.is_constructed() {
        return None;
    }
    match v.header.tag() {
        Tag::PrintableString
        | Tag::T61String
        | Tag::Ia5String
        | Tag::GeneralString
        | Tag::Utf8String
        | Tag::BmpString => Some(String::from_utf8_lossy(v.data).into_owned()),
        _ => None,
    }
}

/// Java's AVA escaping for RFC 2253: a backslash before `, = + < > # ; " \`, `\00` for NUL,
/// and a backslash before each leading or trailing space (or carriage return).
fn escape(s: &str) -> String {
    const SPECIAL: &str = ",=+<>#;\"\\";
    let mut chars: Vec<String> = Vec::with_capacity(s.len());
    for c in s.chars() {
        chars.push(match c {
            c if SPECIAL.contains(c) => format!("\\{c}"),
            '\0' => "\\00".into(),
            c => c.to_string(),
        });
    }
    let blank = |c: &String| c == " " || c == "\r";
    let lead = chars.iter().take_while(|c| blank(c)).count();
    let trail = chars.iter().rev().take_while(|c| blank(c)).count();
    let n = chars.len();
    let mut out = String::with_capacity(s.len() + 4);
    for (i, c) in chars.iter().enumerate() {
        if i < lead || i >= n.saturating_sub(trail) {
            out.push('\\');
        }
        out.push_str(c);
    }
    out
}

/// The DER encoding (identifier, length, contents) of a parsed value.
fn der_encoding(v: &x509_parser::der_parser::asn1_rs::Any<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.data.len() + 6);
    match v.header.raw_tag() {
        Some(raw) => out.extend_from_slice(raw),
        None => {
            let class = (v.header.class() as u8) << 6;
            let constructed = if v.header.is_constructed() { 0x20 } else { 0 };
            let tag = v.header.tag().0;
            if tag < 31 {
                out.push(class | constructed | tag as u8);
            } else {
                out.push(class | constructed | 0x1f);
                let mut groups = Vec::new();
                let mut t = tag;
                loop {
                    groups.push((t & 0x7f) as u8);
                    t >>= 7;
                    if t == 0 {
                        break;
                    }
                }
                for (i, g) in groups.iter().rev().enumerate() {
                    let more = if i + 1 < groups.len() { 0x80 } else { 0 };
                    out.push(g | more);
                }
            }
        }
    }
    let len = v.data.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend_from_slice(&bytes);
    }
    out.extend_from_slice(v.data);
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DER of one TLV.
    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if content.len() < 0x80 {
            out.push(content.len() as u8);
        } else {
            out.push(0x81);
            out.push(content.len() as u8);
        }
        out.extend_from_slice(content);
        out
    }

    fn oid(dotted: &str) -> Vec<u8> {
        let arcs: Vec<u64> = dotted.split('.').map(|a| a.parse().unwrap()).collect();
        let mut body = vec![(arcs[0] * 40 + arcs[1]) as u8];
        for &a in &arcs[2..] {
            let mut groups = vec![(a & 0x7f) as u8];
            let mut v = a >> 7;
            while v > 0 {
                groups.push((v & 0x7f) as u8 | 0x80);
                v >>= 7;
            }
            body.extend(groups.iter().rev());
        }
        tlv(0x06, &body)
    }

    const PRINTABLE: u8 = 0x13;
    const UTF8: u8 = 0x0c;
    const IA5: u8 = 0x16;
    const BMP: u8 = 0x1e;

    /// A Name's DER: RDNs in encoded order, each a set of (OID, string tag, value bytes).
    fn name_der(rdns: &[&[(&str, u8, &[u8])]]) -> Vec<u8> {
        let mut seq = Vec::new();
        for rdn in rdns {
            let mut set = Vec::new();
            for (o, tag, v) in rdn.iter() {
                let mut atv = oid(o);
                atv.extend(tlv(*tag, v));
                set.extend(tlv(0x30, &atv));
            }
            seq.extend(tlv(0x31, &set));
        }
        tlv(0x30, &seq)
    }

    fn dn(rdns: &[&[(&str, u8, &[u8])]]) -> (Vec<u8>, String) {
        let der = name_der(rdns);
        let (_, name) = X509Name::from_der(&der).expect("name parses");
        let s = rfc2253(&name);
        (der, s)
    }

    const CN: &str = "2.5.4.3";
    const O: &str = "2.5.4.10";
    const OU: &str = "2.5.4.11";
    const C: &str = "2.5.4.6";
    const L: &str = "2.5.4.7";
    const ST: &str = "2.5.4.8";
    const DC: &str = "0.9.2342.19200300.100.1.25";
    const UID: &str = "0.9.2342.19200300.100.1.1";
    const EMAIL: &str = "1.2.840.113549.1.9.1";
    const SERIAL: &str = "2.5.4.5";

    /// Each case's expected string is what Java 17's `new X500Principal(der).getName()`
    /// printed for the same DER (checked by hand with a one-off Java program), i.e. the
    /// principal name Kafka's default principal builder gives such a client certificate.
    /// `KMIRROR_DN_DUMP=FILE` writes each case's DER (hex) and our string instead of
    /// asserting, to check them against Java again.
    #[allow(clippy::type_complexity)]
    fn cases() -> Vec<(Vec<Vec<(&'static str, u8, Vec<u8>)>>, &'static str)> {
        let v = |s: &str| s.as_bytes().to_vec();
        let bmp = |s: &str| s.encode_utf16().flat_map(|u| u.to_be_bytes()).collect();
        vec![
            (
                vec![
                    vec![(O, UTF8, v("acme"))],
                    vec![(OU, UTF8, v("eng"))],
                    vec![(CN, UTF8, v("alice"))],
                ],
                "CN=alice,OU=eng,O=acme",
            ),
            (
                vec![
                    vec![(C, PRINTABLE, v("US"))],
                    vec![(ST, PRINTABLE, v("CA"))],
                    vec![(L, PRINTABLE, v("San Francisco"))],
                    vec![(O, PRINTABLE, v("Acme, Inc."))],
                    vec![(CN, PRINTABLE, v("bob"))],
                ],
                "CN=bob,O=Acme\\, Inc.,L=San Francisco,ST=CA,C=US",
            ),
            (
                vec![
                    vec![(DC, IA5, v("com"))],
                    vec![(DC, IA5, v("example"))],
                    vec![(UID, UTF8, v("jdoe"))],
                ],
                "UID=jdoe,DC=example,DC=com",
            ),
            (
                vec![
                    vec![(O, UTF8, v("acme"))],
                    vec![(EMAIL, IA5, v("a@b.c"))],
                    vec![(CN, UTF8, v("carol"))],
                ],
                "CN=carol,1.2.840.113549.1.9.1=#16056140622e63,O=acme",
            ),
            (
                vec![vec![(SERIAL, PRINTABLE, v("42"))], vec![(CN, UTF8, v("x"))]],
                "CN=x,2.5.4.5=#13023432",
            ),
            (
                vec![vec![(CN, UTF8, v("a,b+c=d\"e\\f<g>h;i#j"))]],
                "CN=a\\,b\\+c\\=d\\\"e\\\\f\\<g\\>h\\;i\\#j",
            ),
            (
                vec![vec![(CN, UTF8, v("  pad ")), (OU, UTF8, v("#lead"))]],
                "CN=\\ \\ pad\\ +OU=\\#lead",
            ),
            (
                vec![
                    vec![(CN, UTF8, v("Jörg Müller ☃"))],
                    vec![(O, BMP, bmp("Ünï"))],
                ],
                // Java reads a BMPString's bytes as UTF-8 too.
                "O=\\00\u{fffd}\\00n\\00\u{fffd},CN=Jörg Müller ☃",
            ),
            (
                vec![
                    vec![(O, 0x12, v("123"))],
                    vec![(OU, 0x1a, v("vis"))],
                    vec![(L, 0x14, v("t61"))],
                    vec![(CN, 0x1c, v("\0\0\0u"))],
                ],
                "CN=#1c0400000075,L=t61,OU=#1a03766973,O=#1203313233",
            ),
            (
                vec![
                    vec![("1.2.3.4", UTF8, v("custom"))],
                    vec![(CN, UTF8, v("y"))],
                ],
                "CN=y,1.2.3.4=#0c06637573746f6d",
            ),
        ]
    }

    #[test]
    fn subject_dns_print_as_java_x500principal_get_name() {
        let dump = std::env::var_os("KMIRROR_DN_DUMP");
        let mut lines = String::new();
        for (rdns, want) in cases() {
            let rdns: Vec<Vec<(&str, u8, &[u8])>> = rdns
                .iter()
                .map(|r| r.iter().map(|(o, t, v)| (*o, *t, v.as_slice())).collect())
                .collect();
            let refs: Vec<&[(&str, u8, &[u8])]> = rdns.iter().map(|r| r.as_slice()).collect();
            let (der, got) = dn(&refs);
            lines.push_str(&format!("{}\t{got}\n", hex(&der)));
            if dump.is_none() {
                assert_eq!(got, want);
            }
        }
        if let Some(p) = dump {
            std::fs::write(p, lines).unwrap();
        }
    }
}
