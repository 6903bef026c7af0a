//! Field-connection errors in plain words: what happened and what to do
//! about it ("the host name plc-7.local was not found: check the address
//! or DNS"), with the OPC UA status code kept for the specialist.
//!
//! [`explain`] is the one place an error toward a field server becomes
//! words; the Fields page (live table, recent events, Test connection), the
//! Dashboard and the REST answers that carry such errors all call it. It
//! reads the status code, the URL the error concerns and, for the errors
//! whose status says too little (`BadCommunicationError` is a refused
//! connection as well as a host that cannot be reached), what the gateway's
//! TCP connector (`uagate_field::tcp`) or async-opcua's said, which carries
//! the operating system's reason ("Connection refused", "No route to
//! host") in its Display or Debug form.

use opcua_types::StatusCode;
use serde::{Deserialize, Serialize};
use uagate_field::FieldError;

/// A field-connection error as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Explained {
    /// What happened, in plain words ("connection refused by
    /// 10.0.0.7:4840").
    pub what: String,
    /// What to do about it ("check that the OPC UA server runs there and
    /// listens on port 4840").
    pub todo: String,
    /// The OPC UA status code's name (`BadCommunicationError`), for the
    /// specialist; empty when the gateway found the problem itself.
    pub code: String,
    /// What the specification says the code means, and what the gateway or
    /// its OPC UA stack said (the small print's tooltip).
    pub technical: String,
}

impl Explained {
    /// "what: todo", the one-line form (REST, the dashboard's summary).
    pub fn sentence(&self) -> String {
        if self.todo.is_empty() {
            self.what.clone()
        } else {
            format!("{}: {}", self.what, self.todo)
        }
    }
}

/// Where a URL points, as far as the words need it.
struct Place {
    /// Host name or address as written (an IPv6 address without brackets).
    host: String,
    /// Port (4840 when the URL names none).
    port: u16,
    /// The URL is an `opc.tcp://` one with a host.
    valid: bool,
}

impl Place {
    fn of(url: &str) -> Place {
        let lower = url.to_ascii_lowercase();
        let Some(rest) = lower
            .starts_with("opc.tcp://")
            .then(|| &url["opc.tcp://".len()..])
        else {
            return Place {
                host: String::new(),
                port: 4840,
                valid: false,
            };
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let (host, port) = match authority.strip_prefix('[') {
            // [v6]:port
            Some(v6) => match v6.split_once(']') {
                Some((h, tail)) => (h, tail.strip_prefix(':')),
                None => (v6, None),
            },
            None => match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            },
        };
        let port = match port {
            Some(p) => p.parse().ok(),
            None => Some(4840),
        };
        Place {
            host: host.to_string(),
            port: port.unwrap_or(4840),
            valid: !host.is_empty() && port.is_some(),
        }
    }

    /// `host:port` (`[v6]:port`).
    fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    fn is_name(&self) -> bool {
        self.host.parse::<std::net::IpAddr>().is_err()
    }
}

/// What the operating system said about a failed TCP connection, found in
/// the detail's Display ("Connection refused (os error 111)") or Debug
/// (`kind: ConnectionRefused`) form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    NameNotFound,
    NameLookupSlow,
    Refused,
    HostUnreachable,
    NetUnreachable,
    TimedOut,
    Dropped,
    Lost,
    Unknown,
}

fn cause(detail: &str) -> Cause {
    let d = detail.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| d.contains(w));
    if d == uagate_field::LOST {
        Cause::Lost
    } else if has(&[uagate_field::tcp::NAME_LOOKUP_SLOW]) {
        Cause::NameLookupSlow
    } else if has(&[
        "does not resolve",
        "failed to lookup address",
        "name or service not known",
        "nodename nor servname",
        "name resolution",
        "no address associated",
    ]) {
        Cause::NameNotFound
    } else if has(&["connection refused", "connectionrefused"]) {
        Cause::Refused
    } else if has(&["no route to host", "hostunreachable", "host is unreachable"]) {
        Cause::HostUnreachable
    } else if has(&["network is unreachable", "networkunreachable"]) {
        Cause::NetUnreachable
    } else if has(&["timed out", "timedout"]) {
        Cause::TimedOut
    } else if has(&[
        "connection reset",
        "connectionreset",
        "broken pipe",
        "brokenpipe",
        "connection aborted",
        "connectionaborted",
        "unexpectedeof",
        "unexpected eof",
    ]) {
        Cause::Dropped
    } else {
        Cause::Unknown
    }
}

/// The one mapping of a field-connection error to plain words: what
/// happened at the URL it concerns, what to do, and the status code with
/// its meaning for the specialist. Called wherever the console or the REST
/// API shows such an error.
pub fn explain(e: &FieldError) -> Explained {
    let Some(status) = e.status else {
        // The gateway's own finding, already in words.
        return Explained {
            what: e.detail.clone(),
            todo: String::new(),
            code: String::new(),
            technical: String::new(),
        };
    };
    let place = Place::of(&e.url);
    let (what, todo) = words(status, &e.detail, &e.url, &place);
    let meaning = status.sub_code().description();
    let detail = e.detail.trim();
    Explained {
        what,
        todo,
        code: status.sub_code().name().to_string(),
        technical: if detail.is_empty() || detail == status.sub_code().name() {
            meaning.to_string()
        } else {
            format!("{meaning} {detail}")
        },
    }
}

/// The (what, todo) of `status` toward `url`.
fn words(status: StatusCode, detail: &str, url: &str, place: &Place) -> (String, String) {
    let at = if place.valid {
        place.address()
    } else {
        url.to_string()
    };
    let host = &place.host;
    let port = place.port;
    let s = |what: String, todo: &str| (what, todo.to_string());
    let net = cause(detail);
    match status {
        StatusCode::BadTcpEndpointUrlInvalid if !place.valid => s(
            format!("{url} is not an address the gateway can connect to"),
            "enter it as opc.tcp://host:port, e.g. opc.tcp://10.0.3.10:4840",
        ),
        StatusCode::BadTcpEndpointUrlInvalid if place.is_name() => s(
            format!("the host name {host} was not found"),
            "check the address or DNS",
        ),
        StatusCode::BadTcpEndpointUrlInvalid => s(
            format!("the address {at} cannot be used"),
            "check the address",
        ),
        _ if net == Cause::NameLookupSlow => s(
            format!("the host name {host} did not resolve in time"),
            "check the gateway's DNS server settings, or enter the server's IP address",
        ),
        StatusCode::BadCommunicationError
        | StatusCode::BadNotConnected
        | StatusCode::BadConnectionClosed
        | StatusCode::BadSecureChannelClosed
        | StatusCode::BadDisconnect
        | StatusCode::BadNoCommunication => match net {
            Cause::NameNotFound => s(
                format!("the host name {host} was not found"),
                "check the address or DNS",
            ),
            Cause::Refused => (
                format!("connection refused by {at}"),
                format!("check that the OPC UA server runs there and listens on port {port}"),
            ),
            Cause::HostUnreachable => s(
                format!("{host} cannot be reached (no route to the host)"),
                "check that the device is switched on, its IP address and the cabling",
            ),
            Cause::NetUnreachable => s(
                format!("the network of {host} cannot be reached from the gateway"),
                "check the gateway's network settings and routes",
            ),
            Cause::TimedOut => (
                format!("{at} did not answer"),
                format!("check the address and that no firewall blocks port {port}"),
            ),
            Cause::Dropped => s(
                format!("{at} closed the connection"),
                "the server may be restarting or allow no more connections: check it",
            ),
            Cause::Lost => s(
                format!("the connection to {at} was lost"),
                "the gateway reconnects by itself; if it keeps happening, check the network and the server",
            ),
            Cause::Unknown | Cause::NameLookupSlow => s(
                format!("the connection to {at} failed"),
                "check the address, the network and that the server runs",
            ),
        },
        StatusCode::BadTimeout | StatusCode::BadRequestTimeout => (
            format!("{at} did not answer in time"),
            format!("check that the server runs and that no firewall blocks port {port}"),
        ),
        StatusCode::BadConnectionRejected => s(
            format!("{at} rejected the connection"),
            "the server may allow no more connections or refuse the gateway's address: check its settings",
        ),
        StatusCode::BadSecurityChecksFailed | StatusCode::BadCertificateUseNotAllowed => s(
            format!("{at} did not accept the gateway's certificate"),
            "trust the gateway's certificate on the field server (look in its rejected certificates)",
        ),
        StatusCode::BadCertificateUntrusted => s(
            format!("the certificate of {at} is not trusted"),
            "use Test connection to compare its fingerprint with the one the field server shows, then trust it",
        ),
        StatusCode::BadCertificateTimeInvalid | StatusCode::BadCertificateIssuerTimeInvalid => s(
            format!("the certificate of {at} has expired or is not valid yet"),
            "renew the field server's certificate, or check the clocks of both",
        ),
        StatusCode::BadCertificateHostNameInvalid => (
            format!("the certificate of {at} is not made out for the host {host}"),
            "connect with the host name its certificate names, or renew the certificate".into(),
        ),
        StatusCode::BadCertificateUriInvalid => s(
            format!("the certificate of {at} does not match the server's application URI"),
            "renew the field server's certificate",
        ),
        StatusCode::BadCertificateRevoked | StatusCode::BadCertificateIssuerRevoked => s(
            format!("the certificate of {at} has been revoked"),
            "install a new certificate on the field server",
        ),
        StatusCode::BadCertificateRevocationUnknown
        | StatusCode::BadCertificateIssuerRevocationUnknown => s(
            format!("the revocation list for the certificate of {at} is missing"),
            "add its certificate authority's revocation list (CRL) on the Certificates page",
        ),
        StatusCode::BadCertificateInvalid | StatusCode::BadCertificateChainIncomplete => s(
            format!("{at} sent no usable certificate"),
            "check the field server's certificate",
        ),
        StatusCode::BadSecurityPolicyRejected | StatusCode::BadSecurityModeRejected => s(
            format!("{at} offers no endpoint with the chosen message security and policy"),
            "choose a security it offers (Test connection lists them)",
        ),
        StatusCode::BadIdentityTokenInvalid if detail.is_empty() || net != Cause::Unknown => s(
            format!("{at} does not take this login"),
            "check the login kind, user name and password under User identity",
        ),
        StatusCode::BadIdentityTokenInvalid => (
            format!("the login for {at} could not be prepared: {detail}"),
            "check the user certificate and private key files under User identity".into(),
        ),
        StatusCode::BadIdentityTokenRejected | StatusCode::BadUserSignatureInvalid => s(
            format!("{at} refused the login"),
            "check the user name and password, or the user certificate, under User identity",
        ),
        StatusCode::BadUserAccessDenied => s(
            format!("{at} refused the login: this user may not log in or lacks the rights"),
            "check the user and its rights on the field server",
        ),
        StatusCode::BadTooManySessions
        | StatusCode::BadServerTooBusy
        | StatusCode::BadTcpServerTooBusy
        | StatusCode::BadMaxConnectionsReached => s(
            format!("{at} is too busy or has no room for another session"),
            "close unused sessions on the field server or raise its session limit; the gateway keeps trying",
        ),
        StatusCode::BadShutdown | StatusCode::BadServerHalted => s(
            format!("{at} is shutting down or stopped"),
            "start it again; the gateway keeps trying",
        ),
        StatusCode::BadSessionIdInvalid
        | StatusCode::BadSessionClosed
        | StatusCode::BadSessionNotActivated => s(
            format!("{at} ended the gateway's session"),
            "the gateway opens a new one; if it keeps happening, check the server's session limits and timeout",
        ),
        StatusCode::BadTcpMessageTooLarge
        | StatusCode::BadEncodingLimitsExceeded
        | StatusCode::BadResponseTooLarge
        | StatusCode::BadRequestTooLarge => s(
            format!("a message to or from {at} was larger than allowed"),
            "raise the field server's message size limit, or lower the connection's operation limits",
        ),
        StatusCode::BadConfigurationError => s(
            format!("the settings for {at} cannot be used"),
            "check the connection's settings",
        ),
        _ => s(
            format!("{at} answered with an error"),
            "the status code below tells an OPC UA specialist what happened",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(status: StatusCode, detail: &str, url: &str) -> Explained {
        explain(&FieldError {
            status: Some(status),
            detail: detail.to_string(),
            url: url.to_string(),
        })
    }

    /// The details are what the gateway's connector (`uagate_field::tcp`)
    /// and async-opcua's say, as `client_error` formats them
    /// ("{error} {error:?}").
    #[test]
    fn network_failures_say_what_happened_and_what_to_do() {
        let e = at(
            StatusCode::BadTcpEndpointUrlInvalid,
            "BadTcpEndpointUrlInvalid: Invalid address opc.tcp://plc-7.local:4840, cannot be parsed Custom { kind: Uncategorized, error: \"failed to lookup address information: Name or service not known\" }",
            "opc.tcp://plc-7.local:4840",
        );
        assert_eq!(e.what, "the host name plc-7.local was not found");
        assert_eq!(e.todo, "check the address or DNS");
        assert_eq!(e.code, "BadTcpEndpointUrlInvalid");
        assert!(e.technical.contains("Name or service not known"), "{e:?}");
        assert_eq!(
            e.sentence(),
            "the host name plc-7.local was not found: check the address or DNS"
        );
        // The gateway's own connector says it differently; same words.
        let e = at(
            StatusCode::BadTcpEndpointUrlInvalid,
            "opc.tcp://plc-7.local:4840/UA does not resolve to an address",
            "opc.tcp://plc-7.local:4840/UA",
        );
        assert_eq!(e.what, "the host name plc-7.local was not found");

        let e = at(
            StatusCode::BadCommunicationError,
            "BadCommunicationError: Could not connect to host 10.0.0.7:4840, Os { code: 111, kind: ConnectionRefused, message: \"Connection refused\" }",
            "opc.tcp://10.0.0.7:4840",
        );
        assert_eq!(e.what, "connection refused by 10.0.0.7:4840");
        assert_eq!(
            e.todo,
            "check that the OPC UA server runs there and listens on port 4840"
        );
        let e = at(
            StatusCode::BadCommunicationError,
            "cannot connect to 10.0.0.7:4841: Connection refused (os error 111)",
            "opc.tcp://10.0.0.7:4841/",
        );
        assert_eq!(e.what, "connection refused by 10.0.0.7:4841");

        let e = at(
            StatusCode::BadCommunicationError,
            "Could not connect to host 10.0.9.9:4840, Os { code: 113, kind: HostUnreachable, message: \"No route to host\" }",
            "opc.tcp://10.0.9.9:4840",
        );
        assert_eq!(e.what, "10.0.9.9 cannot be reached (no route to the host)");
        let e = at(
            StatusCode::BadCommunicationError,
            "cannot connect to 192.168.7.2:4840: Network is unreachable (os error 101)",
            "opc.tcp://192.168.7.2:4840",
        );
        assert_eq!(
            e.what,
            "the network of 192.168.7.2 cannot be reached from the gateway"
        );
        let e = at(
            StatusCode::BadCommunicationError,
            "Cannot send hello to server, err = Connection reset by peer (os error 104)",
            "opc.tcp://plc:4840",
        );
        assert_eq!(e.what, "plc:4840 closed the connection");
        let e = at(
            StatusCode::BadConnectionClosed,
            uagate_field::LOST,
            "opc.tcp://plc:4840",
        );
        assert_eq!(e.what, "the connection to plc:4840 was lost");
        let e = at(StatusCode::BadCommunicationError, "", "opc.tcp://plc:4840");
        assert_eq!(e.what, "the connection to plc:4840 failed");
        assert_eq!(
            e.technical,
            StatusCode::BadCommunicationError.sub_code().description()
        );

        let e = at(
            StatusCode::BadTimeout,
            "connect attempt timed out",
            "opc.tcp://[fd00::7]:4855/path",
        );
        assert_eq!(e.what, "[fd00::7]:4855 did not answer in time");
        assert_eq!(
            e.todo,
            "check that the server runs and that no firewall blocks port 4855"
        );
        // A name lookup that took too long is not the server's fault.
        let e = at(
            StatusCode::BadTimeout,
            &format!(
                "BadTimeout: {} plc-7.plant did not finish within 5000 ms",
                uagate_field::tcp::NAME_LOOKUP_SLOW
            ),
            "opc.tcp://plc-7.plant:4840",
        );
        assert_eq!(e.what, "the host name plc-7.plant did not resolve in time");
        assert_eq!(
            e.todo,
            "check the gateway's DNS server settings, or enter the server's IP address"
        );
        let e = at(
            StatusCode::BadConnectionRejected,
            "",
            "opc.tcp://plc-7:4840",
        );
        assert_eq!(e.what, "plc-7:4840 rejected the connection");
        // Not an opc.tcp URL at all.
        let e = at(
            StatusCode::BadTcpEndpointUrlInvalid,
            "not an opc.tcp URL: http://plc",
            "http://plc",
        );
        assert_eq!(
            e.what,
            "http://plc is not an address the gateway can connect to"
        );
    }

    #[test]
    fn security_and_login_failures_name_the_fix() {
        let url = "opc.tcp://10.0.0.7:4840";
        let e = at(StatusCode::BadSecurityChecksFailed, "", url);
        assert_eq!(
            e.what,
            "10.0.0.7:4840 did not accept the gateway's certificate"
        );
        assert!(e
            .todo
            .contains("trust the gateway's certificate on the field server"));
        let e = at(
            StatusCode::BadCertificateUntrusted,
            "field server certificate not trusted",
            url,
        );
        assert_eq!(e.what, "the certificate of 10.0.0.7:4840 is not trusted");
        assert!(e.todo.contains("Test connection"), "{e:?}");
        for code in [
            StatusCode::BadIdentityTokenRejected,
            StatusCode::BadUserSignatureInvalid,
        ] {
            let e = at(code, "", url);
            assert_eq!(e.what, "10.0.0.7:4840 refused the login");
            assert!(e.todo.contains("user name and password"));
        }
        let e = at(StatusCode::BadUserAccessDenied, "", url);
        assert!(e
            .what
            .starts_with("10.0.0.7:4840 refused the login: this user may not"));
        // An identity file the gateway cannot read is not the server's refusal.
        let e = at(
            StatusCode::BadIdentityTokenInvalid,
            "No such file or directory (os error 2)",
            url,
        );
        assert!(e.what.contains("could not be prepared"), "{e:?}");
        let e = at(StatusCode::BadSecurityPolicyRejected, "", url);
        assert!(e
            .what
            .contains("offers no endpoint with the chosen message security"));
        let e = at(StatusCode::BadTooManySessions, "", url);
        assert!(e.what.contains("no room for another session"));
        // Anything else: a sentence all the same, the code for the specialist.
        let e = at(StatusCode::BadNodeIdUnknown, "", url);
        assert_eq!(e.what, "10.0.0.7:4840 answered with an error");
        assert_eq!(e.code, "BadNodeIdUnknown");
    }

    #[test]
    fn the_gateways_own_findings_are_kept_as_said() {
        let e = explain(&FieldError {
            status: None,
            detail: "the server takes no user name and password login on this endpoint (it takes: anonymous)".into(),
            url: "opc.tcp://plc:4840".into(),
        });
        assert_eq!(
            e.what,
            "the server takes no user name and password login on this endpoint (it takes: anonymous)"
        );
        assert_eq!(e.code, "");
        assert_eq!(e.sentence(), e.what);
    }
}
