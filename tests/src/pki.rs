//! A throwaway certificate authority for TLS tests: a CA, server certificates for loopback
//! and client certificates with a chosen subject, written as PEM files in a temp directory.
//! Kafka (`ssl.keystore.type=PEM`), librdkafka, franz-go and kmirror all read these files.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// PEM files of one identity.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The certificate followed by the CA's (the chain a peer is shown).
    pub cert: PathBuf,
    /// The PKCS#8 private key, unencrypted.
    pub key: PathBuf,
    /// Key and chain in one file: Java's `ssl.keystore.location` with `ssl.keystore.type=PEM`.
    pub keystore: PathBuf,
}

/// A CA that signs server and client certificates.
pub struct TestPki {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
    /// The CA certificate (the truststore of every peer).
    pub ca_pem: PathBuf,
}

impl TestPki {
    pub fn new() -> TestPki {
        TestPki::named("kmirror test CA")
    }

    /// A CA whose subject CN is `cn` (two CAs with different names do not trust each other).
    pub fn named(cn: &str) -> TestPki {
        let dir = tempfile::tempdir().expect("temp dir");
        let ca_key = KeyPair::generate().expect("CA key");
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, cn);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = p.self_signed(&ca_key).expect("CA cert");
        let ca_pem = dir.path().join("ca.pem");
        std::fs::write(&ca_pem, ca.pem()).expect("write CA");
        TestPki {
            dir,
            ca,
            ca_key,
            ca_pem,
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A server certificate valid for `localhost` and `127.0.0.1`, subject `CN=<name>`.
    pub fn server(&self, name: &str) -> Identity {
        self.issue(
            name,
            &[("CN", name)],
            vec!["localhost".into(), "127.0.0.1".into()],
        )
    }

    /// A client certificate whose subject is `dn`, in encoding order, most general first as
    /// CAs issue them (e.g. `[("O","acme"),("CN","alice")]`). Kafka's default principal
    /// prints the RDNs the other way round (RFC 2253): `User:CN=alice,O=acme`.
    pub fn client(&self, file_stem: &str, dn: &[(&str, &str)]) -> Identity {
        self.issue(file_stem, dn, Vec::new())
    }

    fn issue(&self, stem: &str, dn: &[(&str, &str)], sans: Vec<String>) -> Identity {
        let key = KeyPair::generate().expect("key");
        let mut p = CertificateParams::new(sans).expect("params");
        // rcgen starts with CN="rcgen self signed cert": an empty DN keeps `dn`'s order.
        p.distinguished_name = DistinguishedName::new();
        for (k, v) in dn {
            let t = match *k {
                "CN" => DnType::CommonName,
                "O" => DnType::OrganizationName,
                "OU" => DnType::OrganizationalUnitName,
                "C" => DnType::CountryName,
                "L" => DnType::LocalityName,
                "ST" => DnType::StateOrProvinceName,
                other => panic!("unsupported DN attribute {other}"),
            };
            p.distinguished_name.push(t, *v);
        }
        let cert = p.signed_by(&key, &self.ca, &self.ca_key).expect("sign");
        let chain = format!("{}{}", cert.pem(), self.ca.pem());
        let key_pem = key.serialize_pem();
        let d = self.dir.path();
        let id = Identity {
            cert: d.join(format!("{stem}.pem")),
            key: d.join(format!("{stem}-key.pem")),
            keystore: d.join(format!("{stem}-keystore.pem")),
        };
        std::fs::write(&id.cert, &chain).expect("write cert");
        std::fs::write(&id.key, &key_pem).expect("write key");
        std::fs::write(&id.keystore, format!("{key_pem}{chain}")).expect("write keystore");
        id
    }
}

impl Default for TestPki {
    fn default() -> Self {
        TestPki::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_files_are_pem_with_chain_and_key() {
        let pki = TestPki::new();
        let s = pki.server("broker");
        let chain = std::fs::read_to_string(&s.cert).unwrap();
        assert_eq!(chain.matches("BEGIN CERTIFICATE").count(), 2);
        let key = std::fs::read_to_string(&s.key).unwrap();
        assert!(key.contains("BEGIN PRIVATE KEY"));
        let ks = std::fs::read_to_string(&s.keystore).unwrap();
        assert!(ks.starts_with("-----BEGIN PRIVATE KEY"));
        let c = pki.client("alice", &[("O", "acme"), ("OU", "eng"), ("CN", "alice")]);
        assert!(c.cert.exists() && c.key.exists());
        // The subject is encoded in the order given (openssl prints it RFC 2253 style,
        // most specific first, as Kafka does).
        if let Ok(out) = std::process::Command::new("openssl")
            .args(["x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in"])
            .arg(&c.cert)
            .output()
        {
            let subject = String::from_utf8_lossy(&out.stdout);
            assert_eq!(subject.trim(), "subject=CN=alice,OU=eng,O=acme");
        }
    }
}
