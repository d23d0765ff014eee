//! A throw-away PKI for tests: a CA, a server certificate for `localhost` and `127.0.0.1`, and
//! a client certificate with a chosen common name, all generated with rcgen (ECDSA P-256) when
//! asked for; plus helpers to issue more (another CA, self-signed, other names, an RSA key).
//! Test code only: built for the crate's tests and with the `testing` feature.

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::sync::OnceLock;

/// Common name of the test server certificate.
pub const SERVER_COMMON_NAME: &str = "pgtier test server";
/// Names the test server certificate is valid for.
pub const SERVER_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];
/// Common name of the default client certificate.
pub const CLIENT_COMMON_NAME: &str = "alice";

/// A 2048-bit RSA key made for these tests only (ring cannot generate RSA keys), so RSA
/// certificates and the TLS 1.2 ECDHE-RSA suites can be tested. It protects nothing.
const TEST_RSA_KEY_PEM: &str = "\
-----BEGIN PRIVATE KEY-----\n\
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCrKsWkWhLA0w/O\n\
cBS8eS4PZIbY5PXRlKrpVY0JvC2egRBy92dW6E8qcNWT0BbaaGqVZXCijkDesaUt\n\
twLa98wrPstOVpR/xD2e17sSLPcHXge+8bChPRYos77OaMKT0lTxjGcP4espv1Ne\n\
HdHfm/SWSa0dxDmxGJrdfOwD0nPrbC2whQQmUjEOyFbHrZRqNlD3Y6EQRPxXzD2b\n\
a1Tjv3c2eY6tvXc7xX+2wnzHd9ea9UzYwk0GxjguWgBUNMYveGU1/lzqHotI5XRM\n\
R7zBaTPITp+9z/fRptVeVHMx6ojcROCASY4Wqi6EvMuf9DrlhMxPJUnsi+SYla2+\n\
19EQNTw9AgMBAAECggEAAjAvS6fCd/LwJPWmMOH5tppUkP7zAjq80/PTNEMoGs/P\n\
69sBgrPAmKx4RoX8AiR17F1aIHHiHsFgTmJ5vQk6883p38wCj6mXbL7u9iSwrx2Y\n\
IBb16PHKJTtls+d/SVArOX/6gfz45SqRgHFa0VmB5HlM/HBEQ+EqewIRqwYsk4oO\n\
pLfxyGx8d50nCX9W8BvK+ObAOCOWSqamTL6W8znvmzkVfj/5Y5T0Z8CscXoYaJt6\n\
MtUdsAN2vCMfhDiv3Fc1l2cyO6loUcykLUz9f5TVQtABRzPQ9P0ahMqCmBizDcj3\n\
WCAjMi51zLZGQ3TqdhhYbouPoyR4TNOiZN/Z1NbC0QKBgQDekIpVefWEL58uS+zv\n\
MLeXQRFeiR/KuhBX+PZgvKqtn28LgHYiTCw/PcVJW7j+bmn3VcF+isNAzI5kBiOc\n\
RvxTGv4jp3WCLYICFMXE6p/zpljdHjiIpFbUXA1QyPPe14iMFoBR8COoCkXcaeAg\n\
bmIpC2oIfJgMPt7qD+QPhPFRyQKBgQDE4ZG5tp4Ypj2viqkJNMpTCflO1aEDgdhU\n\
BX0k5Kisg6GkiFev6/rT/WvAB515+/Ib7DhPB84u3AIAn7BHfLS4V1xoQbNhCsyC\n\
/SXA3nn1IGbjTggiL+QkfCHxfUt1kgvi0otdW6S6xtRWnsbF+jlxpWhlVANK/mzo\n\
F5RCeqKw1QKBgBrAGrBdYUILC0HgRFEXdOmMG49WQej25iH8vXgxFP6bTBiAzzIe\n\
H69WOFEx4hFKqhfdSc1w1jkCnRaumjcdXRSMCQG2DeyglaC0aHTbknARjVq+WCMs\n\
RXduvPb5wD4Hf9T+m1u91jtLSMxOOW8MdWXjhlIQz6GhKN/PGyU2YF7pAoGBAK7X\n\
AurB2jRZrX4uzV53mxWTTetMm+jZbptvJGuXBJPvcaUDz5tTHTUVYJLwMFEcBS32\n\
4SqN6/SBPOYA6jMR9AugyVdswTf0txm8ZcKZ0AR3+ebybRavIROliR9D/bczM4sD\n\
HvCRagDUgc1Kw4sdY9Yg5kzWBvaaa2zRQ8Cl18ThAoGAUoCqGBiGKHabaR6ME3WB\n\
qSfh1MG4HcU9yBLZBzrkUQ7Oxp0ea21CTldGAsys1mk8BecMSClhATQRBvPD/uxS\n\
kPzvHnz8UTdUSbzy1VzvlA433V1xB9PJDe+7oeeHY6XCTofIRINsAJsurGM/nEgz\n\
9WiwDpla2onp9Z0wqHRtZXc=\n\
-----END PRIVATE KEY-----\n";

/// A certificate and its key, as PEM.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    der: Vec<u8>,
}

impl Issued {
    /// The certificate in DER.
    pub fn cert_der(&self) -> Vec<u8> {
        self.der.clone()
    }
}

/// A CA with a server and a client certificate it signed.
pub struct TestPki {
    pub ca_cert_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
    server_der: Vec<u8>,
    client_der: Vec<u8>,
    ca: Certificate,
    ca_key: KeyPair,
}

impl TestPki {
    /// A new CA, a server certificate for [`SERVER_NAMES`] and a client certificate for
    /// [`CLIENT_COMMON_NAME`], all ECDSA P-256.
    pub fn new() -> TestPki {
        TestPki::build(CLIENT_COMMON_NAME, None)
    }

    /// As [`TestPki::new`] with the client certificate's common name `client_cn`.
    pub fn with_client(client_cn: &str) -> TestPki {
        TestPki::build(client_cn, None)
    }

    /// As [`TestPki::new`] with an RSA server key.
    pub fn with_rsa_server() -> TestPki {
        let key = KeyPair::from_pem(TEST_RSA_KEY_PEM).expect("the test RSA key parses");
        TestPki::build(CLIENT_COMMON_NAME, Some(key))
    }

    /// One PKI shared by the tests of a process (for property tests that run many cases).
    pub fn shared() -> &'static TestPki {
        static SHARED: OnceLock<TestPki> = OnceLock::new();
        SHARED.get_or_init(TestPki::new)
    }

    fn build(client_cn: &str, server_key: Option<KeyPair>) -> TestPki {
        let ca_key = KeyPair::generate().expect("generate the CA key");
        let ca = ca_params("pgtier test CA")
            .self_signed(&ca_key)
            .expect("self-sign the CA");
        let server_key = server_key.unwrap_or_else(|| KeyPair::generate().expect("server key"));
        let server = server_params(SERVER_COMMON_NAME, &SERVER_NAMES)
            .signed_by(&server_key, &ca, &ca_key)
            .expect("sign the server certificate");
        let client = TestPki::sign_client(client_cn, &ca, &ca_key);
        TestPki {
            ca_cert_pem: ca.pem(),
            server_cert_pem: server.pem(),
            server_key_pem: server_key.serialize_pem(),
            server_der: server.der().to_vec(),
            client_cert_pem: client.cert_pem.clone(),
            client_key_pem: client.key_pem.clone(),
            client_der: client.der,
            ca,
            ca_key,
        }
    }

    /// The server certificate in DER.
    pub fn server_cert_der(&self) -> Vec<u8> {
        self.server_der.clone()
    }

    /// The client certificate in DER.
    pub fn client_cert_der(&self) -> Vec<u8> {
        self.client_der.clone()
    }

    /// Another client certificate from this CA.
    pub fn issue_client(&self, common_name: &str) -> Issued {
        TestPki::sign_client(common_name, &self.ca, &self.ca_key)
    }

    /// Another server certificate from this CA, for `names` (DNS names or IP addresses).
    pub fn issue_server(&self, names: &[&str]) -> Issued {
        let key = KeyPair::generate().expect("server key");
        let cert = server_params(SERVER_COMMON_NAME, names)
            .signed_by(&key, &self.ca, &self.ca_key)
            .expect("sign the server certificate");
        issued(&cert, &key)
    }

    /// A server certificate from this CA for `names` that expired in 2001.
    pub fn issue_expired_server(&self, names: &[&str]) -> Issued {
        let key = KeyPair::generate().expect("server key");
        let mut params = server_params(SERVER_COMMON_NAME, names);
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        let cert = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .expect("sign the server certificate");
        issued(&cert, &key)
    }

    /// The CA certificate in DER.
    pub fn ca_cert_der(&self) -> Vec<u8> {
        self.ca.der().to_vec()
    }

    /// An X.509 version 1 certificate from this CA (no extensions, as `openssl ca` makes
    /// without an extensions section) with subject `CN=common_name`, valid from January 1st
    /// of `from_year` to January 1st of `until_year`; ECDSA P-256 with SHA-256. rcgen makes
    /// only version 3, so it is encoded here and signed with ring.
    pub fn issue_v1(&self, common_name: &str, from_year: u32, until_year: u32) -> Issued {
        let key = KeyPair::generate().expect("v1 key");
        let ca_der = self.ca.der().to_vec();
        let issuer = super::certificate::Certificate::parse(&ca_der)
            .expect("the test CA parses")
            .subject
            .to_vec();
        let signer = ring::signature::EcdsaKeyPair::from_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            &self.ca_key.serialize_der(),
            &ring::rand::SystemRandom::new(),
        )
        .expect("the CA key is P-256");
        let der = v1_certificate(&V1Fields {
            issuer: &issuer,
            common_name,
            from_year,
            until_year,
            spki: &key.public_key_der(),
            signer: &signer,
        });
        let body = der_base64(&der);
        Issued {
            cert_pem: format!("-----BEGIN CERTIFICATE-----\n{body}-----END CERTIFICATE-----\n"),
            key_pem: key.serialize_pem(),
            der,
        }
    }

    /// A self-signed server certificate for `names`, signed by no CA.
    pub fn self_signed_server(names: &[&str]) -> Issued {
        let key = KeyPair::generate().expect("server key");
        let cert = server_params(SERVER_COMMON_NAME, names)
            .self_signed(&key)
            .expect("self-sign");
        issued(&cert, &key)
    }

    fn sign_client(common_name: &str, ca: &Certificate, ca_key: &KeyPair) -> Issued {
        let key = KeyPair::generate().expect("client key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
        params
            .distinguished_name
            .push(DnType::OrganizationName, "pgtier tests");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params
            .signed_by(&key, ca, ca_key)
            .expect("sign the client certificate");
        issued(&cert, &key)
    }
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki")
            .field("ca_cert_pem", &self.ca_cert_pem)
            .field("server_cert_pem", &self.server_cert_pem)
            .field("client_cert_pem", &self.client_cert_pem)
            .finish_non_exhaustive()
    }
}

impl Default for TestPki {
    fn default() -> TestPki {
        TestPki::new()
    }
}

fn issued(cert: &Certificate, key: &KeyPair) -> Issued {
    Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        der: cert.der().to_vec(),
    }
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

fn server_params(common_name: &str, names: &[&str]) -> CertificateParams {
    let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
    let mut params = CertificateParams::new(names).expect("server params");
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params
}

/// What a test version 1 certificate is made of.
struct V1Fields<'a> {
    issuer: &'a [u8],
    common_name: &'a str,
    from_year: u32,
    until_year: u32,
    spki: &'a [u8],
    signer: &'a ring::signature::EcdsaKeyPair,
}

/// Encodes and signs a version 1 certificate (no version field, no extensions).
fn v1_certificate(fields: &V1Fields<'_>) -> Vec<u8> {
    const ECDSA_WITH_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
    const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
    let algorithm = tlv(0x30, &tlv(0x06, ECDSA_WITH_SHA256));
    let name = tlv(
        0x30,
        &tlv(
            0x31,
            &tlv(
                0x30,
                &[
                    tlv(0x06, COMMON_NAME),
                    tlv(0x0c, fields.common_name.as_bytes()),
                ]
                .concat(),
            ),
        ),
    );
    let validity = tlv(
        0x30,
        &[time(fields.from_year), time(fields.until_year)].concat(),
    );
    let serial = tlv(0x02, &[0x01, 0x23, 0x45]);
    let tbs = tlv(
        0x30,
        &[
            serial,
            algorithm.clone(),
            fields.issuer.to_vec(),
            validity,
            name,
            fields.spki.to_vec(),
        ]
        .concat(),
    );
    let signature = fields
        .signer
        .sign(&ring::rand::SystemRandom::new(), &tbs)
        .expect("sign");
    let bits = [&[0u8][..], signature.as_ref()].concat();
    tlv(0x30, &[tbs, algorithm, tlv(0x03, &bits)].concat())
}

/// January 1st of `year`, 00:00:00 UTC, as DER requires it (UTCTime before 2050).
fn time(year: u32) -> Vec<u8> {
    match year {
        1950..=2049 => tlv(0x17, format!("{:02}0101000000Z", year % 100).as_bytes()),
        _ => tlv(0x18, format!("{year:04}0101000000Z").as_bytes()),
    }
}

/// One DER element.
fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    match contents.len() {
        length @ 0..=0x7f => out.push(length as u8),
        length @ 0x80..=0xff => out.extend_from_slice(&[0x81, length as u8]),
        length => {
            let length = u16::try_from(length).expect("test certificates are small");
            out.push(0x82);
            out.extend_from_slice(&length.to_be_bytes());
        }
    }
    out.extend_from_slice(contents);
    out
}

/// Base64 in 64-character lines, as PEM writes it.
fn der_base64(der: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::new();
    for chunk in der.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            text.push(match i <= chunk.len() {
                true => char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]),
                false => '=',
            });
        }
    }
    let mut lines = String::new();
    for line in text.as_bytes().chunks(64) {
        lines.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        lines.push('\n');
    }
    lines
}
