//! The endpoint descriptions the server offers, built from the
//! configuration's `[[endpoints]]` (or the default set) once at start.

use opcua_crypto::SecurityPolicy;
use opcua_types::{
    ApplicationDescription, ApplicationType, ByteString, EndpointDescription, LocalizedText,
    MessageSecurityMode, UAString, UserTokenPolicy, UserTokenType,
};
use uagate_config::{Endpoint, SecurityMode, UserToken};

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
