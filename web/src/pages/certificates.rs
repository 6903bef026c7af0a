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
use crate::error::ApiError;
use crate::ops;
use crate::state::WebState;

/// One certificate list on the page.
pub struct CertList {
    title: &'static str,
    kind: &'static str,
    certs: Vec<CertInfo>,
}

/// The TLS certificate as the page shows it.
pub struct TlsRow {
    subject: String,
    fingerprint: String,
    not_after: String,
}

#[derive(Template)]
#[template(path = "certificates.html")]
struct CertificatesPage {
    chrome: Chrome,
    app_cert: Option<CertSummary>,
    tls: Option<TlsRow>,
    lists: Vec<CertList>,
    crl_count: usize,
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
                certs,
            }),
            Err(e) => return error_page(e.into()),
        }
    }
    let crl_count = state.store.crls().await.map(|c| c.len()).unwrap_or(0);
    let (chrome, status) = Chrome::with_error(who, "Certificates", "/certificates", flash, error);
    let t = CertificatesPage {
        chrome,
        app_cert: uagate_store::describe_certificate(&state.engine.application_certificate()).ok(),
        tls: state.engine.tls_certificate().map(|t| TlsRow {
            subject: t.subject,
            fingerprint: t.fingerprint,
            not_after: t.not_after.to_rfc3339(),
        }),
        lists,
        crl_count,
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
            .find(|(n, _)| n == "crl")
            .map(|(_, b)| b)
            .ok_or_else(|| ApiError::invalid("crl", "choose a CRL file"))?;
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
            .find(|(n, _)| n == "certificate")
            .map(|(_, b)| b)
            .ok_or_else(|| ApiError::invalid("certificate", "choose a certificate file"))?;
        ops::add_certificate(&state, &who, &cert, &kind).await
    }
    .await;
    match result {
        Ok(c) => done("/certificates", &format!("Added {}.", c.subject)),
        Err(e) => render_certificates(&state, &who, None, Some(e)).await,
    }
}
