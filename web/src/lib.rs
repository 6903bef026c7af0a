#![forbid(unsafe_code)]
//! `uagate-web`: the operator-facing HTTP side of the appliance: the REST
//! API under `/api/v1` (and, built on it, the browser console).
//!
//! [`app`] builds the router over a [`WebState`]: the store (users, the
//! configuration document, the audit trail), the running engine (status,
//! live reconfiguration), the token keys and the login throttle. Every
//! route except login requires a token; the route table of [`routes`]
//! states the least role of each, and the router refuses a lesser caller
//! before the handler runs. Errors are [`ApiError`]s: JSON with a stable
//! code.
//!
//! The modules, from the bottom up (each uses only those listed before
//! it): [`error`] the error type; [`digest`] how certificate digests are
//! written; [`auth`] tokens, roles and the login throttle; [`state`] the
//! shared state; [`access`] what every request passes (CSRF, renewal, the
//! caller, the role check); [`field_text`] field-connection errors in plain
//! words; [`ops`] the
//! operations both the REST API and the pages call; [`audit_text`] the
//! audit log in words; [`api`], [`rest`],
//! [`users`], [`metrics`] and [`openapi`] the REST side; [`pages`] the
//! console, one module per page; [`routes`] the router over all of them.

pub mod access;
pub mod api;
pub mod audit_text;
pub mod auth;
pub mod digest;
pub mod error;
pub mod field_text;
pub mod headers;
pub mod listener;
pub mod metrics;
pub mod openapi;
pub mod ops;
pub mod pages;
pub mod replicated;
pub mod rest;
pub mod routes;
pub mod state;
pub mod users;

pub use auth::{Authed, TokenKeys};
pub use error::ApiError;
pub use listener::serve_tls;
pub use routes::app;
pub use state::WebState;
pub use uagate_server::throttle::LoginThrottle;
