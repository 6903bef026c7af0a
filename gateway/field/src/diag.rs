//! Operation-level diagnostics of proxied services.
//!
//! A DiagnosticInfo names its strings by index into the string table of the
//! response that carries it. When the results of several southbound
//! responses (batches, mounts) are merged into one northbound response, each
//! response's strings are appended to one table and the indexes of its
//! diagnostic infos are shifted by where its strings start. Operations that
//! have no diagnostics (local ones, or a field server that sent none) get a
//! null DiagnosticInfo, so the list stays parallel to the results.

use opcua_types::{DiagnosticBits, DiagnosticInfo, UAString};

/// Whether a request asked for operation-level diagnostics.
pub fn wants_operation_level(bits: DiagnosticBits) -> bool {
    bits.bits() & 0x3e0 != 0
}

/// Per-operation diagnostic infos and the string table they index.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Diagnostics {
    /// One per operation (null when none); empty when nothing was received.
    pub infos: Vec<DiagnosticInfo>,
    /// The string table the infos index.
    pub strings: Vec<UAString>,
}

impl Diagnostics {
    /// Diagnostics for `n` operations, none of them set yet.
    pub fn with_len(n: usize) -> Diagnostics {
        Diagnostics {
            infos: Vec::new(),
            strings: Vec::new(),
        }
        .sized(n)
    }

    fn sized(mut self, n: usize) -> Diagnostics {
        self.infos.resize(n, DiagnosticInfo::null());
        self
    }

    /// Adds the strings of one response and returns the shift to apply to
    /// its diagnostic infos' indexes.
    pub fn add_strings(&mut self, strings: Option<Vec<UAString>>) -> i32 {
        let shift = i32::try_from(self.strings.len()).unwrap_or(i32::MAX);
        self.strings.extend(strings.unwrap_or_default());
        shift
    }

    /// Places the infos of one response (indexes already shifted) at the
    /// operation positions `at`; extra or missing infos are ignored.
    pub fn place(&mut self, at: &[usize], infos: Option<Vec<DiagnosticInfo>>) {
        let Some(infos) = infos else { return };
        for (i, d) in at.iter().zip(infos) {
            if let Some(slot) = self.infos.get_mut(*i) {
                *slot = d;
            }
        }
    }

    /// Merges `other` (a sub-answer for the operations `at`) into this one.
    pub fn merge(&mut self, at: &[usize], other: Diagnostics) {
        let shift = self.add_strings(Some(other.strings));
        let infos = other
            .infos
            .into_iter()
            .map(|mut d| {
                shift_indexes(&mut d, shift);
                d
            })
            .collect();
        self.place(at, Some(infos));
    }

    /// The response's DiagnosticInfos: None unless at least one is set.
    pub fn infos(&self) -> Option<Vec<DiagnosticInfo>> {
        self.infos
            .iter()
            .any(|d| *d != DiagnosticInfo::null())
            .then(|| self.infos.clone())
    }

    /// The response header's string table: None when empty.
    pub fn string_table(&self) -> Option<Vec<UAString>> {
        (!self.strings.is_empty()).then(|| self.strings.clone())
    }
}

/// Shifts every string index of `d` (and of its inner infos) by `shift`.
pub fn shift_indexes(d: &mut DiagnosticInfo, shift: i32) {
    if shift == 0 {
        return;
    }
    let mut cur = Some(d);
    // Inner infos nest; the decoder bounds the depth.
    while let Some(info) = cur {
        for idx in [
            &mut info.symbolic_id,
            &mut info.namespace_uri,
            &mut info.locale,
            &mut info.localized_text,
        ] {
            if let Some(v) = idx.as_mut() {
                if *v >= 0 {
                    *v = v.saturating_add(shift);
                }
            }
        }
        cur = info.inner_diagnostic_info.as_deref_mut();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(text: i32) -> DiagnosticInfo {
        DiagnosticInfo {
            localized_text: Some(text),
            inner_diagnostic_info: Some(Box::new(DiagnosticInfo {
                symbolic_id: Some(text + 1),
                ..DiagnosticInfo::null()
            })),
            ..DiagnosticInfo::null()
        }
    }

    #[test]
    fn merging_two_answers_rebases_the_second_and_keeps_positions() {
        let mut all = Diagnostics::with_len(4);
        let a = Diagnostics {
            infos: vec![info(0)],
            strings: vec!["a0".into(), "a1".into()],
        };
        let b = Diagnostics {
            infos: vec![info(0), DiagnosticInfo::null()],
            strings: vec!["b0".into(), "b1".into()],
        };
        all.merge(&[1], a);
        all.merge(&[3, 0], b);
        assert_eq!(all.strings.len(), 4);
        assert_eq!(all.infos[0], DiagnosticInfo::null());
        assert_eq!(all.infos[1].localized_text, Some(0));
        assert_eq!(all.infos[3].localized_text, Some(2));
        assert_eq!(
            all.infos[3]
                .inner_diagnostic_info
                .as_ref()
                .unwrap()
                .symbolic_id,
            Some(3)
        );
        assert_eq!(all.strings[2], UAString::from("b0"));
        assert!(all.infos().is_some());
        assert!(Diagnostics::with_len(3).infos().is_none());
    }

    #[test]
    fn operation_level_bits() {
        assert!(!wants_operation_level(DiagnosticBits::empty()));
        assert!(!wants_operation_level(DiagnosticBits::from_bits_truncate(
            0x1f
        )));
        assert!(wants_operation_level(DiagnosticBits::from_bits_truncate(
            0x20
        )));
        assert!(wants_operation_level(DiagnosticBits::from_bits_truncate(
            0x3ff
        )));
    }
}
