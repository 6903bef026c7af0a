#![forbid(unsafe_code)]
//! Southbound field connections (issue 6, in progress): managed sessions
//! toward field servers. So far: the sans-IO reconnect policy.

pub mod policy;
