//! Images in a conversation: a user's, and those a tool returns with its result.
//!
//! A message carries an image as a [`ContentBlock::Image`] block. Saved with the
//! run (by [`save_message`](crate::save_message), the agent's first message, and the
//! results of tool calls), each image's data becomes a document of its own, type
//! [`IMAGE_DOCUMENT`], keyed by a hash of its data and saved once per run however
//! many messages, turns and checkpoints show it; the message keeps an
//! [`Image::Stored`] reference, which a request to a model replaces with the data
//! again. A conversation without images pays nothing: messages that show one are
//! marked in their metadata ([`IMAGES_META`]), and only those are looked at.
//!
//! On the wire, a user's image is an Anthropic `image` block or an OpenAI
//! `image_url` content part; a tool's image is inside Anthropic's `tool_result`
//! content, and, since an OpenAI `tool` message carries text only, an OpenAI
//! request shows it in a `user` message right after the call's `tool` messages
//! (introduced by `The result of call <id> came with this image:`).

use std::sync::Arc;

use loopstack_core::{DocumentType, RunContext, SaveOptions};
use serde::{Deserialize, Serialize};

pub use loopstack_core::image::{DEFAULT_MAX_IMAGE_BYTES, Image, ImageError, MediaType};

use crate::call_result::ToolCallResult;
use crate::message::{ContentBlock, Message, Role, ToolResult};

/// The type name of the documents that hold a run's images.
pub const IMAGE_DOCUMENT: &str = "llm_image";

/// The metadata entry of a message document that shows images: how many.
pub const IMAGES_META: &str = "images";

/// An image's data, saved once as a document of the run (type [`IMAGE_DOCUMENT`],
/// keyed by a hash of the data) and referred to by the messages that show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageDocument {
    /// Its format.
    pub media_type: MediaType,
    /// The bytes, base64.
    pub data: Arc<str>,
}

impl DocumentType for ImageDocument {
    const TYPE: &'static str = IMAGE_DOCUMENT;
}

impl ToolCallResult {
    /// A user message carrying tool call results, each followed by the images its
    /// tool returned (blocks with the call's `tool_use_id`).
    pub fn message(results: &[Self]) -> Message {
        let mut content = Vec::with_capacity(results.len() + results.iter().map(|r| r.images.len()).sum::<usize>());
        for result in results {
            content.push(ContentBlock::ToolResult(ToolResult::from(result)));
            content.extend(result.images.iter().map(|image| ContentBlock::Image {
                source: image.clone(),
                tool_use_id: Some(result.tool_use_id.clone()),
            }));
        }
        Message { role: Role::User, content }
    }
}

impl crate::Agent {
    /// Runs the agent on `prompt` with `images` shown after it, like
    /// [`Agent::ask`](crate::Agent::ask).
    ///
    /// The images are saved once, as image documents of the run, by its first step;
    /// they are never in a checkpoint. (A run resumed after a crash before that step
    /// committed starts without them.)
    ///
    /// ```
    /// use loopstack_llm::{Agent, Image, ScriptedModel};
    /// use loopstack_core::{Runtime, ToolRegistry};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let png = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d];
    /// let model = ScriptedModel::new().text("A tiny picture.");
    /// let agent = Agent::new(model.clone(), "scripted", ToolRegistry::new());
    /// let image = Image::from_bytes(&png).unwrap();
    /// let reply = agent.ask_with_images(&Runtime::new(), "What is this?", [image.clone()]).await.unwrap();
    /// assert_eq!(reply.text, "A tiny picture.");
    /// // The model was shown the image's data.
    /// let requests = model.requests();
    /// let (shown, _) = requests[0].messages[0].images().next().unwrap();
    /// assert_eq!(shown, &image);
    /// # });
    /// ```
    pub async fn ask_with_images(
        &self,
        runtime: &loopstack_core::Runtime,
        prompt: impl Into<String>,
        images: impl IntoIterator<Item = Image>,
    ) -> Result<crate::AgentReply, crate::AskError> {
        let mut agent = self.clone();
        agent.prompt_images = images.into_iter().collect();
        agent.ask(runtime, prompt).await
    }

    /// The prompt's images as blocks.
    pub(crate) fn prompt_image_blocks(&self) -> Vec<ContentBlock> {
        self.prompt_images
            .iter()
            .map(|image| ContentBlock::Image { source: image.clone(), tool_use_id: None })
            .collect()
    }
}

/// The key of the document that holds `data`: its size and a 128-bit FNV-1a hash.
fn key_of(media_type: MediaType, data: &str) -> String {
    let mut hash = loopstack_core::fnv::Fnv1a::<u128>::default();
    hash.bytes(media_type.as_str().as_bytes());
    hash.bytes(data.as_bytes());
    format!("image-{}-{:032x}", data.len(), hash.finish())
}

/// Saves the data of each base64 image of `message` as an image document of the run
/// (unless the run has it already) and puts a reference in its place; returns how
/// many images the message shows (URLs included).
pub(crate) fn store_images(cx: &mut RunContext, message: &mut Message) -> Result<usize, serde_json::Error> {
    let mut count = 0;
    for block in &mut message.content {
        let ContentBlock::Image { source, .. } = block else { continue };
        count += 1;
        store_image(cx, source)?;
    }
    Ok(count)
}

/// Saves one image's data (once per run) and makes `image` a reference to it.
pub(crate) fn store_image(cx: &mut RunContext, image: &mut Image) -> Result<(), serde_json::Error> {
    let Image::Base64 { media_type, data } = image else { return Ok(()) };
    let (media_type, key) = (*media_type, key_of(*media_type, data));
    let saved = cx.documents().iter().any(|d| d.doc_type == IMAGE_DOCUMENT && d.key.as_deref() == Some(&key));
    if !saved {
        let document = Arc::new(ImageDocument { media_type, data: data.clone() });
        let options = SaveOptions::new()
            .key(key.clone())
            .meta("media_type", media_type.as_str())
            .meta("bytes", image.decoded_len().unwrap_or_default());
        cx.save_shared(document, options)?;
    }
    *image = Image::Stored { key, media_type };
    Ok(())
}

/// Stores the images of tool call results (see [`store_image`]), so that what the
/// state keeps of them between steps is a reference.
pub(crate) fn store_result_images(
    cx: &mut RunContext,
    results: &mut [ToolCallResult],
) -> Result<(), serde_json::Error> {
    for result in results {
        for image in &mut result.images {
            store_image(cx, image)?;
        }
    }
    Ok(())
}

/// Saves a user message, its images stored once as documents of the run (see
/// [`store_images`]) and the message marked as showing them.
pub(crate) fn save_with_images(
    cx: &mut RunContext,
    mut message: Message,
    name: Option<&str>,
    options: SaveOptions,
) -> Result<(), serde_json::Error> {
    let count = store_images(cx, &mut message)?;
    let options = if count > 0 { options.meta(IMAGES_META, count) } else { options };
    crate::generate::save_shared_message(cx, Arc::new(message), name, options)
}

/// Puts the data of each stored image of `message` back, from the run's image
/// documents, for a request to a model.
pub(crate) fn resolve_images(cx: &RunContext, message: &mut Message) -> Result<(), serde_json::Error> {
    for block in &mut message.content {
        let ContentBlock::Image { source: image @ Image::Stored { .. }, .. } = block else { continue };
        let Image::Stored { key, .. } = &*image else { continue };
        let doc = cx
            .documents()
            .iter()
            .find(|d| d.doc_type == IMAGE_DOCUMENT && d.key.as_deref() == Some(key.as_str()))
            .ok_or_else(|| {
                <serde_json::Error as serde::de::Error>::custom(format_args!(
                    "the image document `{key}` the conversation refers to is not in the run"
                ))
            })?;
        let saved = cx.read_shared::<ImageDocument>(doc)?;
        *image = Image::Base64 { media_type: saved.media_type, data: saved.data.clone() };
    }
    Ok(())
}

/// Whether a message document shows images (see [`IMAGES_META`]).
#[inline]
pub(crate) fn shows_images(doc: &loopstack_core::Document) -> bool {
    !doc.metadata.is_empty() && doc.metadata.contains_key(IMAGES_META)
}
