//! The image version, from the os-release file the image build writes
//! (`IMAGE_VERSION=`, else `VERSION_ID=`). Read when the System page or
//! `GET /api/v1/system` is shown.

/// The image version in an os-release text: `IMAGE_VERSION`, else
/// `VERSION_ID`; quotes around the value are removed. `None` when neither
/// is there (or is empty).
pub fn image_version(text: &str) -> Option<String> {
    value(text, "IMAGE_VERSION").or_else(|| value(text, "VERSION_ID"))
}

/// Whether an os-release text is the uagate appliance image's: the image
/// build writes `IMAGE_ID=uagate`. A host with RAUC installed but not this
/// image has no RAUC service for the gateway to talk to.
pub fn is_appliance_image(text: &str) -> bool {
    value(text, "IMAGE_ID").as_deref() == Some("uagate")
}

/// The value of `key` in an os-release text, without quotes; `None` when
/// it is not there or empty.
pub fn value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.trim().split_once('=')?;
        if k.trim() != key {
            return None;
        }
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(v);
        (!v.is_empty()).then(|| v.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_version_wins_over_version_id() {
        let text =
            "PRETTY_NAME=\"uagate appliance\"\nVERSION_ID=\"12\"\nIMAGE_VERSION=\"2025.06.1\"\n";
        assert_eq!(image_version(text).as_deref(), Some("2025.06.1"));
    }

    #[test]
    fn version_id_without_image_version() {
        let text = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n";
        assert_eq!(image_version(text).as_deref(), Some("12"));
    }

    #[test]
    fn the_appliance_image_names_itself() {
        assert!(is_appliance_image(
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nIMAGE_ID=uagate\nIMAGE_VERSION=0.3.0\n"
        ));
        assert!(is_appliance_image("IMAGE_ID=\"uagate\"\n"));
        assert!(!is_appliance_image(
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_ID=\"12\"\nID=debian\n"
        ));
        assert!(!is_appliance_image("IMAGE_ID=other\n"));
    }

    #[test]
    fn neither_or_empty() {
        assert_eq!(image_version("ID=debian\n"), None);
        assert_eq!(
            image_version("IMAGE_VERSION=\"\"\nVERSION_ID=12"),
            Some("12".into())
        );
        assert_eq!(image_version(""), None);
    }
}
