//! Images a model is shown: in a user's message, or returned by a tool (a chart, a
//! screenshot) beside its text.
//!
//! An [`Image`] is base64 data with its [`MediaType`], a URL the provider fetches,
//! or, once a run has saved it, a reference to the run's document that holds it
//! (saved once, however many checkpoints and turns follow). Only the types every
//! provider takes are accepted (PNG, JPEG, GIF, WebP), each image at most
//! [`DEFAULT_MAX_IMAGE_BYTES`] decoded unless a limit of your own is given.
//!
//! ```
//! use loopstack_model::image::{Image, ImageError, MediaType};
//!
//! // A 1x1 PNG: the media type comes from its bytes.
//! let png = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d];
//! let image = Image::from_bytes(&png).unwrap();
//! assert_eq!(image.media_type(), Some(MediaType::Png));
//!
//! let err = Image::from_bytes_with_limit(&png, 4).unwrap_err();
//! assert_eq!(err, ImageError::TooLarge { bytes: 12, limit: 4 });
//! assert!(matches!(Image::base64("image/tiff", "AAAA"), Err(ImageError::UnsupportedMediaType(_))));
//! ```

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

/// The largest image accepted unless a limit is given: 5 MiB decoded, Anthropic's
/// limit per image.
pub const DEFAULT_MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// An image format the providers take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MediaType {
    /// `image/png`
    #[serde(rename = "image/png")]
    Png,
    /// `image/jpeg`
    #[serde(rename = "image/jpeg")]
    Jpeg,
    /// `image/gif`
    #[serde(rename = "image/gif")]
    Gif,
    /// `image/webp`
    #[serde(rename = "image/webp")]
    Webp,
}

impl MediaType {
    /// The MIME type: `image/png`, ...
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Png => "image/png",
            Self::Jpeg => "image/jpeg",
            Self::Gif => "image/gif",
            Self::Webp => "image/webp",
        }
    }

    /// Reads a MIME type (case does not matter; `image/jpg` is JPEG); any other is
    /// [`ImageError::UnsupportedMediaType`].
    pub fn parse(mime: &str) -> Result<Self, ImageError> {
        match mime.trim().to_ascii_lowercase().as_str() {
            "image/png" => Ok(Self::Png),
            "image/jpeg" | "image/jpg" => Ok(Self::Jpeg),
            "image/gif" => Ok(Self::Gif),
            "image/webp" => Ok(Self::Webp),
            _ => Err(ImageError::UnsupportedMediaType(mime.to_owned())),
        }
    }

    /// The format the bytes are in, from their first bytes (the "magic numbers").
    pub fn sniff(bytes: &[u8]) -> Option<Self> {
        match bytes {
            [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, ..] => Some(Self::Png),
            [0xff, 0xd8, 0xff, ..] => Some(Self::Jpeg),
            [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => Some(Self::Gif),
            [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => Some(Self::Webp),
            _ => None,
        }
    }

    /// The format a file name's extension names (`png`, `jpg`, `jpeg`, `gif`, `webp`;
    /// case does not matter).
    pub fn from_extension(extension: &str) -> Option<Self> {
        match extension.to_ascii_lowercase().as_str() {
            "png" => Some(Self::Png),
            "jpg" | "jpeg" => Some(Self::Jpeg),
            "gif" => Some(Self::Gif),
            "webp" => Some(Self::Webp),
            _ => None,
        }
    }
}

impl std::fmt::Display for MediaType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an image is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The decoded image is larger than the limit.
    #[error("the image is {bytes} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// Its decoded size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A media type the providers do not take.
    #[error("`{0}` is not an image type a model is sent (image/png, image/jpeg, image/gif or image/webp)")]
    UnsupportedMediaType(String),
    /// Bytes that are not PNG, JPEG, GIF or WebP.
    #[error("the bytes are not a PNG, JPEG, GIF or WebP image")]
    UnknownFormat,
    /// Base64 data that does not decode.
    #[error("the image's base64 data does not decode: {0}")]
    InvalidBase64(String),
    /// A URL that is not `http://` or `https://`.
    #[error("`{0}` is not an http or https URL")]
    InvalidUrl(String),
    /// No bytes at all (a provider refuses a request that shows an empty image).
    #[error("the image is empty")]
    Empty,
}

/// An image shown to a model.
///
/// Serialized with a `type` tag: `{"type": "base64", "media_type": "image/png",
/// "data": "..."}`, `{"type": "url", "url": "..."}`, or `{"type": "stored", "key":
/// "...", "media_type": "image/png"}` for one saved as a run's document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Image {
    /// The image's bytes, base64 (standard alphabet, padded).
    Base64 {
        /// Its format.
        media_type: MediaType,
        /// The bytes, base64; shared, so copies of a message do not copy it.
        data: Arc<str>,
    },
    /// An image the provider fetches itself.
    Url {
        /// An `http://` or `https://` URL.
        url: String,
    },
    /// An image saved as document `key` of the run (type `llm_image`); a request
    /// to a model is sent its data.
    Stored {
        /// The document's key.
        key: String,
        /// Its format.
        media_type: MediaType,
    },
}

impl Image {
    /// An image from its bytes, its format read from them; at most
    /// [`DEFAULT_MAX_IMAGE_BYTES`]. No bytes are an [`ImageError::Empty`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ImageError> {
        Self::from_bytes_with_limit(bytes, DEFAULT_MAX_IMAGE_BYTES)
    }

    /// An image from its bytes, at most `limit` bytes.
    pub fn from_bytes_with_limit(bytes: &[u8], limit: usize) -> Result<Self, ImageError> {
        if bytes.is_empty() {
            return Err(ImageError::Empty);
        }
        if bytes.len() > limit {
            return Err(ImageError::TooLarge { bytes: bytes.len(), limit });
        }
        let media_type = MediaType::sniff(bytes).ok_or(ImageError::UnknownFormat)?;
        Ok(Self::Base64 { media_type, data: STANDARD.encode(bytes).into() })
    }

    /// An image from base64 data of MIME type `media_type`, at most
    /// [`DEFAULT_MAX_IMAGE_BYTES`] decoded; data that decodes to no bytes is an
    /// [`ImageError::Empty`].
    pub fn base64(media_type: &str, data: impl Into<String>) -> Result<Self, ImageError> {
        Self::base64_with_limit(media_type, data, DEFAULT_MAX_IMAGE_BYTES)
    }

    /// An image from base64 data, at most `limit` bytes decoded.
    pub fn base64_with_limit(media_type: &str, data: impl Into<String>, limit: usize) -> Result<Self, ImageError> {
        let media_type = MediaType::parse(media_type)?;
        let data = data.into();
        let bytes = decoded_len(&data);
        if bytes > limit {
            return Err(ImageError::TooLarge { bytes, limit });
        }
        let decoded = STANDARD.decode(data.as_bytes()).map_err(|e| ImageError::InvalidBase64(e.to_string()))?;
        if decoded.is_empty() {
            return Err(ImageError::Empty);
        }
        Ok(Self::Base64 { media_type, data: data.into() })
    }

    /// An image the provider fetches from `url` (`http://` or `https://`).
    pub fn url(url: impl Into<String>) -> Result<Self, ImageError> {
        let url = url.into();
        let lower = url.get(..8).unwrap_or(&url).to_ascii_lowercase();
        if !(lower.starts_with("http://") || lower.starts_with("https://")) {
            return Err(ImageError::InvalidUrl(url));
        }
        Ok(Self::Url { url })
    }

    /// Its format; `None` for a URL.
    pub fn media_type(&self) -> Option<MediaType> {
        match self {
            Self::Base64 { media_type, .. } | Self::Stored { media_type, .. } => Some(*media_type),
            Self::Url { .. } => None,
        }
    }

    /// Its size decoded, for base64 data.
    pub fn decoded_len(&self) -> Option<usize> {
        match self {
            Self::Base64 { data, .. } => Some(decoded_len(data)),
            _ => None,
        }
    }

    /// The image as a `data:` URL (`data:image/png;base64,...`), for base64 data.
    pub fn data_url(&self) -> Option<String> {
        match self {
            Self::Base64 { media_type, data } => Some(format!("data:{media_type};base64,{data}")),
            _ => None,
        }
    }

    /// Refuses base64 data over `limit` bytes decoded.
    pub fn check_size(&self, limit: usize) -> Result<(), ImageError> {
        match self.decoded_len() {
            Some(bytes) if bytes > limit => Err(ImageError::TooLarge { bytes, limit }),
            _ => Ok(()),
        }
    }
}

/// The decoded size of padded base64 text, from its length.
fn decoded_len(data: &str) -> usize {
    let padding = data.bytes().rev().take(2).filter(|&b| b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

/// `image image/png` (`image image/png for call_1` for a tool's), or `image <url>`.
pub(crate) fn fmt_image(f: &mut std::fmt::Formatter<'_>, image: &Image, call: Option<&str>) -> std::fmt::Result {
    match image {
        Image::Url { url } => write!(f, "image {url}")?,
        other => match other.media_type() {
            Some(media_type) => write!(f, "image {media_type}")?,
            None => f.write_str("image")?,
        },
    }
    match call {
        Some(call) => write!(f, " for {call}"),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_read_from_bytes_names_and_types() {
        assert_eq!(MediaType::sniff(&[0xff, 0xd8, 0xff, 0xe0]), Some(MediaType::Jpeg));
        assert_eq!(MediaType::sniff(b"GIF89a...."), Some(MediaType::Gif));
        assert_eq!(MediaType::sniff(b"RIFF\x10\0\0\0WEBPVP8 "), Some(MediaType::Webp));
        assert_eq!(MediaType::sniff(b"%PDF-1.7"), None);
        assert_eq!(MediaType::from_extension("JPG"), Some(MediaType::Jpeg));
        assert_eq!(MediaType::from_extension("tiff"), None);
        assert_eq!(MediaType::parse("Image/JPG").unwrap(), MediaType::Jpeg);
        assert_eq!(Image::from_bytes(b"%PDF-1.7"), Err(ImageError::UnknownFormat));
    }

    #[test]
    fn sizes_are_checked_decoded() {
        // 6 bytes are 8 characters of base64; 5 bytes too, padded.
        let six = STANDARD.encode([1u8; 6]);
        assert_eq!(decoded_len(&six), 6);
        assert_eq!(decoded_len(&STANDARD.encode([1u8; 5])), 5);
        assert_eq!(decoded_len(&STANDARD.encode([1u8; 4])), 4);
        assert!(Image::base64_with_limit("image/png", six.clone(), 6).is_ok());
        assert_eq!(Image::base64_with_limit("image/png", six, 5), Err(ImageError::TooLarge { bytes: 6, limit: 5 }));
        assert!(matches!(Image::base64("image/png", "not base64!"), Err(ImageError::InvalidBase64(_))));
        // No bytes: refused where the image is made, not by the provider later.
        assert_eq!(Image::base64("image/png", ""), Err(ImageError::Empty));
        assert_eq!(Image::from_bytes(&[]), Err(ImageError::Empty));
        assert!(matches!(Image::url("file:///etc/passwd"), Err(ImageError::InvalidUrl(_))));
        assert!(Image::url("HTTPS://example.com/a.png").is_ok());
    }

    #[test]
    fn images_serialize_with_a_type_tag() {
        let image = Image::base64("image/png", "AAAA").unwrap();
        let json = serde_json::to_value(&image).unwrap();
        assert_eq!(json, serde_json::json!({"type": "base64", "media_type": "image/png", "data": "AAAA"}));
        assert_eq!(serde_json::from_value::<Image>(json).unwrap(), image);
        let err = serde_json::from_value::<Image>(serde_json::json!({"type": "base64", "media_type": "image/bmp"}));
        assert!(err.is_err());
        assert_eq!(image.data_url().unwrap(), "data:image/png;base64,AAAA");
    }
}
