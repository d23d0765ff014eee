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
