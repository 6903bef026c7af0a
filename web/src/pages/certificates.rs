//! Certificates (`/certificates`): the application instance and TLS
//! certificates and the rejected, trusted and issuer lists; an operator
//! trusts a rejected certificate, removes one, uploads a certificate or a
//! CRL.

use askama::Template;
use axum::extract::{Multipart, Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Form;
use serde::Deserialize;
use uagate_store::{CertInfo, CertKind, CertSummary};

use super::{done, error_page, page, take_flash, Chrome};
use crate::auth::Authed;
use crate::digest::Digest;
use crate::error::ApiError;
use crate::ops;
use crate::state::WebState;

/// One certificate list on the page.
pub struct CertList {
    title: &'static str,
    kind: &'static str,
    certs: Vec<CertRow>,
}

/// One certificate as the page shows it: one date format, the SHA-256
/// fingerprint to compare, the SHA-1 thumbprint only as OPC UA's key.
pub struct CertRow {
    subject: String,
    application_uri: Option<String>,
    fingerprint: Digest,
    /// The thumbprint as the store keys it (the forms' value).
    thumbprint: String,
    /// The thumbprint as the console writes digests.
    thumbprint_shown: Digest,
    not_before: String,
    not_after: String,
    /// When it was first seen, or for the rejected list last presented.
    since: String,
    /// Rejected list, on a pair: which appliance refused it, when the
    /// other one did ("by the other appliance 10.0.3.12:4850"), or that
    /// the primary does not list it yet.
    refused_by: Option<String>,
    /// Past its end of validity.
    expired: bool,
    /// Within 30 days of it: "expires in 12 days".
    soon: Option<String>,
}

impl CertRow {
    fn of(c: &CertInfo) -> CertRow {
        let expiry = ops::expiry(&c.not_after, chrono::Utc::now());
        let expired = matches!(expiry, Some((true, _)));
        let soon = expiry.filter(|(gone, _)| !gone).map(|(_, words)| words);
        CertRow {
            subject: c.subject.clone(),
            application_uri: c.application_uri.clone(),
            fingerprint: Digest::fingerprint(&c.der),
            thumbprint: c.thumbprint.clone(),
            thumbprint_shown: Digest::from_hex(&c.thumbprint),
            not_before: ops::when(&c.not_before),
            not_after: ops::when(&c.not_after),
            since: ops::when(if c.kind == CertKind::Rejected {
                &c.last_seen
            } else {
                &c.first_seen
            }),
            refused_by: match (&c.refused_by, c.report_pending) {
                (Some(peer), _) if c.refused_here => {
                    Some(format!("by this appliance and the other appliance {peer}"))
                }
                (Some(peer), _) => Some(format!("by the other appliance {peer}")),
                (None, true) => Some(
                    "not on the primary's list yet: sent when the primary can be reached".into(),
                ),
                (None, false) => None,
            },
            expired,
            soon,
        }
    }
}

/// One stored CRL as the page shows it.
pub struct CrlRow {
    issuer: String,
    issued: String,
    next_update: String,
    revoked: usize,
    /// `ok`, `warn` or `bad`: how its state is coloured.
    class: &'static str,
    /// Its state in words: current, due soon, or out of date and what that
    /// means for the certificates its CA issued.
    state: String,
}

impl CrlRow {
    fn of(c: &uagate_store::CrlInfo, now: chrono::DateTime<chrono::Utc>) -> CrlRow {
        let (state, words) = ops::crl_state(c.next_update.as_deref(), now);
        CrlRow {
            issuer: c.issuer.clone(),
            issued: ops::when(&c.this_update),
            next_update: c
                .next_update
                .as_deref()
                .map_or_else(|| "not named".to_string(), ops::when),
            revoked: c.revoked,
            class: state.class(),
            state: words,
        }
    }
}

/// This appliance's own certificates as the page shows them.
pub struct OwnRow {
    what: &'static str,
    subject: String,
    fingerprint: Digest,
    /// The OPC UA thumbprint (SHA-1), for the application instance
    /// certificate only.
    thumbprint: Option<Digest>,
    not_after: String,
    /// "expired" or "expires in 12 days" within 30 days of its end, and
    /// whether it has expired.
    expiry: Option<(bool, String)>,
}

#[derive(Template)]
#[template(path = "certificates.html")]
struct CertificatesPage {
    chrome: Chrome,
    own: Vec<OwnRow>,
    lists: Vec<CertList>,
    crls: Vec<CrlRow>,
}

async fn render_certificates(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    error: Option<ApiError>,
) -> Response {
    let mut lists = Vec::new();
    for (title, kind) in [
        ("Rejected (awaiting a decision)", CertKind::Rejected),
        ("Trusted", CertKind::Trusted),
        ("Issuers (CAs)", CertKind::Issuer),
    ] {
        match state.store.certs(kind).await {
            Ok(certs) => lists.push(CertList {
                title,
                kind: kind.as_str(),
                certs: certs.iter().map(CertRow::of).collect(),
            }),
            Err(e) => return error_page(e.into()),
        }
    }
    let now = chrono::Utc::now();
    let crls = match state.store.crl_infos().await {
        Ok(c) => c.iter().map(|c| CrlRow::of(c, now)).collect(),
        Err(e) => return error_page(e.into()),
    };
    let (chrome, status) = Chrome::with_error(who, "Certificates", "/certificates", flash, error);
    let app_der = state.engine.application_certificate();
    let mut own: Vec<OwnRow> = uagate_store::describe_certificate(&app_der)
        .ok()
        .map(|a: CertSummary| OwnRow {
            what: "OPC UA application instance",
            subject: a.subject,
            fingerprint: Digest::fingerprint(&app_der),
            thumbprint: Some(Digest::from_hex(&a.thumbprint)),
            expiry: ops::expiry(&a.not_after, chrono::Utc::now()),
            not_after: ops::when(&a.not_after),
        })
        .into_iter()
        .collect();
    own.extend(state.engine.tls_certificate().map(|t| {
        OwnRow {
            what: "TLS (console, opc.wss, opc.https)",
            subject: t.subject,
            fingerprint: Digest::from_hex(&t.fingerprint),
            thumbprint: None,
            expiry: ops::expiry(
                &t.not_after.with_timezone(&chrono::Utc).to_rfc3339(),
                chrono::Utc::now(),
            ),
            not_after: t
                .not_after
                .with_timezone(&chrono::Utc)
                .format("%Y-%m-%d %H:%M UTC")
                .to_string(),
        }
    }));
    let t = CertificatesPage {
        chrome,
        own,
        lists,
        crls,
    };
    page(&t, status)
}

/// How the page shows a form post the router refused for the caller's
/// role: the page again, with the error above it.
pub async fn refused(state: WebState, who: Authed, error: ApiError, _: Request) -> Response {
    render_certificates(&state, &who, None, Some(error)).await
}

/// `GET /certificates`.
pub async fn show(State(state): State<WebState>, who: Authed, headers: HeaderMap) -> Response {
    let flash = take_flash(&headers);
    render_certificates(&state, &who, flash, None).await
}

/// A form naming one certificate.
#[derive(Debug, Deserialize)]
pub struct ThumbprintForm {
    thumbprint: String,
}

/// `POST /certificates/trust`: moves a rejected certificate to the
/// trusted list.
pub async fn trust(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<ThumbprintForm>,
) -> Response {
    match ops::trust_rejected(&state, &who, &f.thumbprint).await {
        Ok(c) => done("/certificates", &format!("Trusted {}.", c.subject)),
        Err(e) => render_certificates(&state, &who, None, Some(e)).await,
    }
}

/// `POST /certificates/remove`.
pub async fn remove(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<ThumbprintForm>,
) -> Response {
    match ops::remove_certificate(&state, &who, &f.thumbprint).await {
        Ok(()) => done("/certificates", "Certificate removed."),
        Err(e) => render_certificates(&state, &who, None, Some(e)).await,
    }
}

/// Most bytes of an uploaded certificate or CRL.
const MAX_UPLOAD: usize = 16 << 20;

/// Reads the multipart fields of an upload: (field name, bytes).
async fn read_upload(mut m: Multipart) -> Result<Vec<(String, Vec<u8>)>, ApiError> {
    let mut out = Vec::new();
    let mut total = 0usize;
    while let Some(field) = m
        .next_field()
        .await
        .map_err(|e| ApiError::invalid("upload", e.body_text()))?
    {
        let name = field.name().unwrap_or("").to_string();
        let bytes = field
            .bytes()
            .await
            .map_err(|e| ApiError::invalid("upload", e.body_text()))?;
        total += bytes.len();
        if total > MAX_UPLOAD {
            return Err(ApiError::invalid("upload", "larger than 16 MiB"));
        }
        out.push((name, bytes.to_vec()));
    }
    Ok(out)
}

/// `POST /certificates/crl` (multipart): stores a CRL.
pub async fn crl(State(state): State<WebState>, who: Authed, m: Multipart) -> Response {
    let result = async {
        let fields = read_upload(m).await?;
        let crl = fields
            .into_iter()
            // A form sent without a file chosen has the part, empty.
            .find(|(n, b)| n == "crl" && !b.is_empty())
            .map(|(_, b)| b)
            .ok_or_else(|| ApiError::invalid("crl", "Choose the CRL file first."))?;
        ops::add_crl(&state, &who, &crl).await
    }
    .await;
    match result {
        Ok(()) => done("/certificates", "CRL stored."),
        Err(e) => render_certificates(&state, &who, None, Some(e)).await,
    }
}

/// `POST /certificates/upload` (multipart): adds a trusted or
/// issuer certificate.
pub async fn upload(State(state): State<WebState>, who: Authed, m: Multipart) -> Response {
    let result = async {
        let fields = read_upload(m).await?;
        let kind = fields
            .iter()
            .find(|(n, _)| n == "kind")
            .map(|(_, b)| String::from_utf8_lossy(b).to_string())
            .unwrap_or_else(|| "trusted".into());
        let cert = fields
            .into_iter()
            .find(|(n, b)| n == "certificate" && !b.is_empty())
            .map(|(_, b)| b)
            .ok_or_else(|| {
                ApiError::invalid("certificate", "Choose the certificate file first.")
            })?;
        ops::add_certificate(&state, &who, &cert, &kind).await
    }
    .await;
    match result {
        Ok(c) => done("/certificates", &format!("Added {}.", c.subject)),
        Err(e) => render_certificates(&state, &who, None, Some(e)).await,
    }
}
