//! Optional TLS (rustls) on every gRPC connection of the grid. One certificate authority per
//! grid signs a certificate for each component. Servers present theirs; clients check it
//! against the authority and, where the service requires it (the metaserver and compute
//! servers by default), present their own as a client certificate. So without a
//! certificate from the grid's authority a server can neither register, nor fetch from a
//! peer, nor be called, and nobody on the path reads the data or the grid token.
//!
//! `ninf up --tls` and `ninf certs` generate the authority and the certificates
//! ([`generate`]).

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// The `[tls]` section of a component's configuration.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The grid's certificate authority (PEM); peers' certificates must be signed by it.
    pub ca: PathBuf,
    /// This component's certificate (PEM), signed by the authority.
    pub certificate: PathBuf,
    /// Its private key (PEM); refused unless only its owner can read it.
    pub key: PathBuf,
    /// Refuse clients that present no certificate signed by the authority. Default true:
    /// the metaserver and compute servers should keep it; a proxy whose clients
    /// authenticate with the grid token alone sets it to false.
    #[serde(default = "require_by_default")]
    pub require_client_certificates: bool,
}

fn require_by_default() -> bool {
    true
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the private key {path} can be read by others (mode {mode:o}); make it private with `chmod 600 {path}`"
    )]
    ExposedKey { path: String, mode: u32 },
    #[error("{path} holds no PEM {what}")]
    NotPem { path: String, what: &'static str },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// Loaded TLS material: the authority to trust and, for components, their own identity.
#[derive(Debug, Clone)]
pub struct GridTls {
    ca: Certificate,
    identity: Option<Identity>,
    require_client_certificates: bool,
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    let data = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })?;
    if !String::from_utf8_lossy(&data).contains("-----BEGIN ") {
        return Err(TlsError::NotPem {
            path: path.display().to_string(),
            what,
        });
    }
    Ok(data)
}

fn read_private(path: &Path) -> Result<Vec<u8>, TlsError> {
    let metadata = std::fs::metadata(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(TlsError::ExposedKey {
            path: path.display().to_string(),
            mode,
        });
    }
    read(path, "private key")
}

impl GridTls {
    /// A component's material: authority, certificate and private key.
    pub fn load(files: &TlsFiles) -> Result<GridTls, TlsError> {
        let ca = Certificate::from_pem(read(&files.ca, "certificate")?);
        let certificate = read(&files.certificate, "certificate")?;
        let key = read_private(&files.key)?;
        Ok(GridTls {
            ca,
            identity: Some(Identity::from_pem(certificate, key)),
            require_client_certificates: files.require_client_certificates,
        })
    }

    /// The material of a configured `[tls]` section (`None`: plain connections).
    pub fn load_configured(files: Option<&TlsFiles>) -> Result<Option<GridTls>, TlsError> {
        files.map(GridTls::load).transpose()
    }

    /// A client's material when it has no certificate of its own: it checks servers
    /// against the authority, and is accepted only where client certificates are optional.
    pub fn trusting(ca: &Path) -> Result<GridTls, TlsError> {
        Ok(GridTls {
            ca: Certificate::from_pem(read(ca, "certificate")?),
            identity: None,
            require_client_certificates: false,
        })
    }

    /// The listener's side (`None` without a certificate of its own). Client certificates,
    /// when presented, must come from the authority; without one a client is refused if
    /// `require_client_certificates`.
    pub fn server_config(&self) -> Option<ServerTlsConfig> {
        Some(
            ServerTlsConfig::new()
                .identity(self.identity.clone()?)
                .client_ca_root(self.ca.clone())
                .client_auth_optional(!self.require_client_certificates)
                .timeout(Duration::from_secs(10)),
        )
    }

    /// The connecting side: trust only the authority, and present this component's
    /// certificate when it has one.
    pub fn client_config(&self) -> ClientTlsConfig {
        let config = ClientTlsConfig::new()
            .ca_certificate(self.ca.clone())
            .timeout(Duration::from_secs(10));
        match &self.identity {
            Some(identity) => config.identity(identity.clone()),
            None => config,
        }
    }
}

/// Where [`generate`] puts a component's files in `dir`.
pub fn files_in(dir: &Path, name: &str, require_client_certificates: bool) -> TlsFiles {
    TlsFiles {
        ca: dir.join("ca.pem"),
        certificate: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}-key.pem")),
        require_client_certificates,
    }
}

fn write(path: &Path, text: &str, mode: u32) -> Result<(), TlsError> {
    let error = |source| TlsError::Write {
        path: path.display().to_string(),
        source,
    };
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(error)?;
    std::io::Write::write_all(&mut file, text.as_bytes()).map_err(error)
}

/// Creates a new authority in `dir` (`ca.pem`, and `ca-key.pem` with mode 0600) and, for
/// each name, `NAME.pem` and `NAME-key.pem` (0600): a certificate valid for `hosts` (DNS
/// names or IP addresses) as a server and as a client. Replaces what was there.
pub fn generate(dir: &Path, names: &[&str], hosts: &[String]) -> Result<(), TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Write {
        path: dir.display().to_string(),
        source,
    })?;
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "ninf grid authority");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    write(&dir.join("ca.pem"), &ca_cert.pem(), 0o644)?;
    write(&dir.join("ca-key.pem"), &ca_key.serialize_pem(), 0o600)?;
    let issuer = Issuer::new(ca_params, ca_key);
    for name in names {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(hosts.to_vec())?;
        params.distinguished_name.push(DnType::CommonName, *name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &issuer)?;
        write(&dir.join(format!("{name}.pem")), &cert.pem(), 0o644)?;
        write(
            &dir.join(format!("{name}-key.pem")),
            &key.serialize_pem(),
            0o600,
        )?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn generated_material_loads_and_private_keys_are_private() {
        let dir = std::env::temp_dir().join(format!("ninf-tls-{}", std::process::id()));
        generate(&dir, &["server"], &["127.0.0.1".into(), "localhost".into()]).unwrap();
        let files = files_in(&dir, "server", true);
        for key in [&files.key, &dir.join("ca-key.pem")] {
            let mode = std::fs::metadata(key).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", key.display());
        }
        let tls = GridTls::load(&files).unwrap();
        assert!(tls.server_config().is_some());
        assert!(
            GridTls::trusting(&files.ca)
                .unwrap()
                .server_config()
                .is_none(),
            "a server needs its own certificate"
        );
        assert!(super::super::endpoint("127.0.0.1:1", Some(&tls), Default::default()).is_ok());

        std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = GridTls::load(&files).unwrap_err().to_string();
        assert!(e.contains("can be read by others (mode 640)"), "{e}");
        std::fs::write(&files.certificate, "not a certificate").unwrap();
        std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = GridTls::load(&files).unwrap_err().to_string();
        assert!(e.ends_with("server.pem holds no PEM certificate"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
