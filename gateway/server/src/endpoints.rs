//! The endpoint descriptions the server offers, built from the
//! configuration's `[[endpoints]]` (or the default set) once at start, and
//! the engine's endpoints part (`Endpoints`): what the server presents to
//! clients (certificates, application description, endpoints) and the
//! discovery services that list it.

use std::sync::Arc;

use opcua_core::ResponseMessage;
use opcua_crypto::SecurityPolicy;
use opcua_types::{
    ApplicationDescription, ApplicationType, ByteString, EndpointDescription, FindServersRequest,
    FindServersResponse, GetEndpointsRequest, GetEndpointsResponse, LocalizedText,
    MessageSecurityMode, ResponseHeader, UAString, UserTokenPolicy, UserTokenType,
};
use uagate_config::{Endpoint, SecurityMode, UserToken};

use crate::pki::Identity;
use crate::tls::HttpsChannel;
use crate::tls_cert::{TlsIdentity, TlsInfo};

/// Transport profile of opc.tcp with UA Binary.
pub const TCP_PROFILE: &str = "http://opcfoundation.org/UA-Profile/Transport/uatcp-uasc-uabinary";

/// Transport profile of opc.https with UA Binary bodies (OPC 10000-7).
pub const HTTPS_PROFILE: &str = "http://opcfoundation.org/UA-Profile/Transport/https-uabinary";

/// The policy id we give a user token type, so ActivateSession can find it again.
pub fn policy_id(token: UserToken) -> &'static str {
    match token {
        UserToken::Anonymous => "anonymous",
        UserToken::Username => "username",
        UserToken::X509 => "x509",
    }
}

/// Maps a configured policy name to the crypto library's policy.
pub fn security_policy(name: &str) -> SecurityPolicy {
    match name {
        "None" => SecurityPolicy::None,
        "Basic256Sha256" => SecurityPolicy::Basic256Sha256,
        "Aes128_Sha256_RsaOaep" => SecurityPolicy::Aes128Sha256RsaOaep,
        "Aes256_Sha256_RsaPss" => SecurityPolicy::Aes256Sha256RsaPss,
        _ => SecurityPolicy::Unknown,
    }
}

/// Maps a configured mode to the wire enum.
pub fn security_mode(mode: SecurityMode) -> MessageSecurityMode {
    match mode {
        SecurityMode::None => MessageSecurityMode::None,
        SecurityMode::Sign => MessageSecurityMode::Sign,
        SecurityMode::SignAndEncrypt => MessageSecurityMode::SignAndEncrypt,
    }
}

/// One offered endpoint with its crypto policy resolved.
#[derive(Debug, Clone)]
pub struct Offered {
    /// Channel security policy.
    pub policy: SecurityPolicy,
    /// Channel security mode.
    pub mode: MessageSecurityMode,
    /// Accepted identity tokens.
    pub tokens: Vec<UserToken>,
    /// The wire description.
    pub description: EndpointDescription,
}

/// Builds the offered endpoints of a UACP transport (opc.tcp or opc.wss,
/// `profile` its transport profile URI) at `url`.
pub fn build(
    url: &str,
    profile: &str,
    server: &ApplicationDescription,
    certificate: &ByteString,
    configured: &[Endpoint],
) -> Vec<Offered> {
    configured
        .iter()
        .map(|e| {
            let policy = security_policy(&e.security_policy);
            let mode = security_mode(e.security_mode);
            // On an unsecured channel, secrets are protected by the token's own policy.
            let token_policy_uri = if policy == SecurityPolicy::None {
                UAString::from(SecurityPolicy::Basic256Sha256.to_uri())
            } else {
                UAString::null()
            };
            let user_identity_tokens = e
                .user_tokens
                .iter()
                .map(|t| UserTokenPolicy {
                    policy_id: policy_id(*t).into(),
                    token_type: match t {
                        UserToken::Anonymous => UserTokenType::Anonymous,
                        UserToken::Username => UserTokenType::UserName,
                        UserToken::X509 => UserTokenType::Certificate,
                    },
                    issued_token_type: UAString::null(),
                    issuer_endpoint_url: UAString::null(),
                    security_policy_uri: match t {
                        UserToken::Anonymous => UAString::null(),
                        _ => token_policy_uri.clone(),
                    },
                })
                .collect::<Vec<_>>();
            let security_level = match (policy, mode) {
                (SecurityPolicy::None, _) => 0,
                (_, MessageSecurityMode::Sign) => 2,
                (SecurityPolicy::Basic256Sha256, _) => 3,
                (SecurityPolicy::Aes128Sha256RsaOaep, _) => 4,
                _ => 5,
            };
            Offered {
                policy,
                mode,
                tokens: e.user_tokens.clone(),
                description: EndpointDescription {
                    endpoint_url: url.into(),
                    server: server.clone(),
                    // Also on None endpoints: clients encrypt passwords with it.
                    server_certificate: certificate.clone(),
                    security_mode: mode,
                    security_policy_uri: policy.to_uri().into(),
                    user_identity_tokens: Some(user_identity_tokens),
                    transport_profile_uri: profile.into(),
                    security_level,
                },
            }
        })
        .collect()
}

/// The user tokens the opc.https endpoint accepts: every token type some
/// configured endpoint offers. Secrets travel inside TLS, so a UserName
/// password may be sent as is (token security policy None).
pub fn https_tokens(configured: &[Endpoint]) -> Vec<UserToken> {
    let mut tokens = Vec::new();
    for t in [UserToken::Anonymous, UserToken::Username, UserToken::X509] {
        if configured.iter().any(|e| e.user_tokens.contains(&t)) {
            tokens.push(t);
        }
    }
    tokens
}

/// The opc.https endpoint (OPC 10000-6 §7.4): SecurityPolicy None and mode
/// None (TLS protects the connection; there are no channel signatures to
/// make), UA Binary bodies.
pub fn https(
    url: &str,
    server: &ApplicationDescription,
    certificate: &ByteString,
    tokens: &[UserToken],
) -> EndpointDescription {
    let none = UAString::from(SecurityPolicy::None.to_uri());
    EndpointDescription {
        endpoint_url: url.into(),
        server: server.clone(),
        server_certificate: certificate.clone(),
        security_mode: MessageSecurityMode::None,
        security_policy_uri: none.clone(),
        user_identity_tokens: Some(
            tokens
                .iter()
                .map(|t| UserTokenPolicy {
                    policy_id: policy_id(*t).into(),
                    token_type: match t {
                        UserToken::Anonymous => UserTokenType::Anonymous,
                        UserToken::Username => UserTokenType::UserName,
                        UserToken::X509 => UserTokenType::Certificate,
                    },
                    issued_token_type: UAString::null(),
                    issuer_endpoint_url: UAString::null(),
                    security_policy_uri: match t {
                        UserToken::Anonymous => UAString::null(),
                        UserToken::Username => none.clone(),
                        UserToken::X509 => SecurityPolicy::Basic256Sha256.to_uri().into(),
                    },
                })
                .collect(),
        ),
        transport_profile_uri: HTTPS_PROFILE.into(),
        security_level: 1,
    }
}

/// The ApplicationDescription of this server.
pub fn application(name: &str, uri: &str, urls: &[String]) -> ApplicationDescription {
    ApplicationDescription {
        application_uri: uri.into(),
        product_uri: "urn:uagate".into(),
        application_name: LocalizedText::new("en", name),
        application_type: ApplicationType::Server,
        gateway_server_uri: UAString::null(),
        discovery_profile_uri: UAString::null(),
        discovery_urls: Some(urls.iter().map(|u| u.as_str().into()).collect()),
    }
}

/// The endpoint URLs the server advertises, one per transport.
pub(crate) struct Urls {
    /// opc.tcp.
    pub(crate) tcp: String,
    /// opc.wss.
    pub(crate) wss: String,
    /// opc.https.
    pub(crate) https: String,
}

/// What the server presents to clients: its instance certificate and TLS
/// certificate, its application description and the endpoints of every
/// transport.
pub(crate) struct Endpoints {
    identity: Identity,
    application: ApplicationDescription,
    /// The opc.tcp endpoints (a channel opens on one of them).
    offered: Vec<Offered>,
    /// Every endpoint of every transport (opc.tcp, opc.wss, opc.https), as
    /// GetEndpoints and CreateSession list them.
    discovery: Vec<EndpointDescription>,
    /// The logical secure channel shared by opc.https requests.
    https: Option<Arc<HttpsChannel>>,
    /// The TLS certificate of the opc.wss/opc.https listener (live reload).
    tls_identity: Option<Arc<TlsIdentity>>,
}

impl Endpoints {
    /// The endpoints of `configured` at `urls`, for `application`, with the
    /// instance certificate `identity` and the TLS certificate `tls`, and
    /// the opc.https logical channel. Built once at start.
    pub(crate) fn new(
        identity: Identity,
        tls: TlsIdentity,
        application: ApplicationDescription,
        urls: &Urls,
        configured: &[Endpoint],
    ) -> Endpoints {
        let certificate = identity.cert.as_byte_string();
        let offered = build(
            &urls.tcp,
            TCP_PROFILE,
            &application,
            &certificate,
            configured,
        );
        let tokens = https_tokens(configured);
        let mut discovery: Vec<_> = offered.iter().map(|o| o.description.clone()).collect();
        discovery.extend(
            build(
                &urls.wss,
                crate::ws::WSS_PROFILE,
                &application,
                &certificate,
                configured,
            )
            .into_iter()
            .map(|o| o.description),
        );
        discovery.push(https(&urls.https, &application, &certificate, &tokens));
        Endpoints {
            identity,
            application,
            offered,
            discovery,
            https: Some(Arc::new(HttpsChannel::new(
                crate::channels::HTTPS_CHANNEL,
                tokens,
            ))),
            tls_identity: Some(Arc::new(tls)),
        }
    }

    /// The instance certificate, its key and store (channel and session
    /// signatures, password decryption).
    pub(crate) fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The opc.tcp (and opc.wss) endpoints.
    pub(crate) fn offered(&self) -> &[Offered] {
        &self.offered
    }

    /// Every endpoint of every transport.
    pub(crate) fn discovery(&self) -> &[EndpointDescription] {
        &self.discovery
    }

    /// The logical secure channel of opc.https, when it is served.
    pub(crate) fn https(&self) -> Option<&Arc<HttpsChannel>> {
        self.https.as_ref()
    }

    /// The TLS certificate of the opc.wss/opc.https listener.
    pub(crate) fn tls_identity(&self) -> Option<&Arc<TlsIdentity>> {
        self.tls_identity.as_ref()
    }

    /// The TLS server configuration of the appliance's certificate.
    pub(crate) fn tls_server_config(&self) -> Option<Arc<tokio_rustls::rustls::ServerConfig>> {
        self.tls_identity.as_ref().map(|t| t.server_config())
    }

    /// Subject, names, validity and fingerprint of the TLS certificate.
    pub(crate) fn tls_certificate(&self) -> Option<TlsInfo> {
        self.tls_identity.as_ref().map(|t| t.info())
    }

    /// The application instance certificate (DER).
    pub(crate) fn application_certificate(&self) -> Vec<u8> {
        self.identity.cert.as_byte_string().as_ref().to_vec()
    }

    /// GetEndpoints: every transport's endpoints, whichever transport asked.
    pub(crate) fn get_endpoints(&self, r: &GetEndpointsRequest) -> ResponseMessage {
        // Every transport's endpoints, whichever transport asked (a client
        // may discover over opc.tcp and connect over opc.wss or opc.https).
        let wanted = r.profile_uris.as_deref().unwrap_or(&[]);
        let endpoints = self
            .discovery
            .iter()
            .filter(|e| {
                wanted.is_empty()
                    || wanted
                        .iter()
                        .any(|p| p.as_ref() == e.transport_profile_uri.as_ref())
            })
            .cloned()
            .collect();
        GetEndpointsResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            endpoints: Some(endpoints),
        }
        .into()
    }

    /// FindServers: this server, when asked for it or for every server.
    pub(crate) fn find_servers(&self, r: &FindServersRequest) -> ResponseMessage {
        let uris = r.server_uris.as_deref().unwrap_or(&[]);
        let servers = if uris.is_empty()
            || uris
                .iter()
                .any(|u| u.as_ref() == self.application.application_uri.as_ref())
        {
            vec![self.application.clone()]
        } else {
            Vec::new()
        };
        FindServersResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            servers: Some(servers),
        }
        .into()
    }
}
