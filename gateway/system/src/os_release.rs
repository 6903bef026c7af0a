//! The image version, from the os-release file the image build writes
//! (`IMAGE_VERSION=`, else `VERSION_ID=`). Read when the System page or
//! `GET /api/v1/system` is shown.

/// The image version in an os-release text: `IMAGE_VERSION`, else
/// `VERSION_ID`; quotes around the value are removed. `None` when neither
/// is there (or is empty).
pub fn image_version(text: &str) -> Option<String> {
    let value = |key: &str| {
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
    };
    value("IMAGE_VERSION").or_else(|| value("VERSION_ID"))
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
    fn neither_or_empty() {
        assert_eq!(image_version("ID=debian\n"), None);
        assert_eq!(
            image_version("IMAGE_VERSION=\"\"\nVERSION_ID=12"),
            Some("12".into())
        );
        assert_eq!(image_version(""), None);
    }
}
