//! Prompt caching: where a provider that caches by explicit breakpoints (Anthropic)
//! is told that the prompt up to a point is stable and worth caching.

use serde::{Deserialize, Serialize};

/// How a request's stable prefix is marked for the provider's prompt cache, part of
/// [`ModelSettings`](crate::ModelSettings).
///
/// Anthropic caches a prompt's prefix up to each `cache_control` breakpoint (at most
/// four per request) and reads it back at a tenth of the input price when a later
/// request starts with the same prefix; writing it costs a quarter more than plain
/// input, and prefixes shorter than the model's minimum (1,024 or 2,048 tokens) are
/// not cached at all. OpenAI caches long prompts by itself and ignores this setting;
/// its cached tokens are reported in [`Usage::cache_read_input_tokens`](crate::Usage)
/// either way, and [`ModelSettings::prompt_cache_key`](crate::ModelSettings) groups its
/// requests.
///
/// ```
/// use loopstack_model::{CacheBreakpoint, ModelSettings, PromptCache};
///
/// // The default: tools, system prompt, and the conversation up to the newest turn.
/// assert_eq!(ModelSettings::new().prompt_cache, PromptCache::Auto);
/// let off = ModelSettings::new().prompt_cache(PromptCache::Off);
/// let by_hand = ModelSettings::new().prompt_cache(PromptCache::At(vec![CacheBreakpoint::System]));
/// # let _ = (off, by_hand);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PromptCache {
    /// Breakpoints on the stable prefix: after the tools, after the system prompt,
    /// after the newest message and after the user message before it, so each turn of
    /// an agent writes the conversation so far and the next turn reads it back.
    #[default]
    Auto,
    /// No breakpoints.
    Off,
    /// Only these breakpoints (the first four are sent; one that points at nothing,
    /// such as [`CacheBreakpoint::System`] without a system prompt, is skipped).
    At(Vec<CacheBreakpoint>),
}

impl PromptCache {
    /// Whether this is [`PromptCache::Auto`] (the default, left out when serialized).
    pub fn is_auto(&self) -> bool {
        *self == Self::Auto
    }
}

/// Where a cache breakpoint of [`PromptCache::At`] goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CacheBreakpoint {
    /// After the last tool definition.
    Tools,
    /// After the system prompt.
    System,
    /// After the last content block of the message at this index of the request's
    /// conversation (oldest first; negative counts from the end, `-1` the newest).
    Message(i64),
}

/// Anthropic's (and Bedrock's) limit on breakpoints per request.
#[cfg(any(feature = "anthropic", feature = "bedrock"))]
pub(crate) const MAX_BREAKPOINTS: usize = 4;

/// The breakpoints a request gets: tools and system first, then message indices.
#[cfg(any(feature = "anthropic", feature = "bedrock"))]
pub(crate) fn breakpoints(
    cache: &PromptCache,
    has_tools: bool,
    has_system: bool,
    roles_are_user: impl Iterator<Item = bool> + Clone,
) -> (bool, bool, Vec<usize>) {
    let len = roles_are_user.clone().count();
    match cache {
        PromptCache::Off => (false, false, Vec::new()),
        PromptCache::Auto => {
            // The newest message, and the user message before it, where the previous
            // request had its own newest breakpoint (a turn adds an assistant message
            // and a user message).
            let Some(newest) = len.checked_sub(1) else { return (has_tools, has_system, Vec::new()) };
            let previous = roles_are_user.take(newest).enumerate().filter(|(_, user)| *user).map(|(i, _)| i).last();
            (has_tools, has_system, previous.into_iter().chain([newest]).collect())
        }
        PromptCache::At(points) => {
            let (mut tools, mut system, mut messages, mut used) = (false, false, Vec::new(), 0);
            for point in points {
                if used == MAX_BREAKPOINTS {
                    break;
                }
                let placed = match *point {
                    CacheBreakpoint::Tools if has_tools && !tools => {
                        tools = true;
                        true
                    }
                    CacheBreakpoint::System if has_system && !system => {
                        system = true;
                        true
                    }
                    CacheBreakpoint::Message(at) => {
                        let index = if at < 0 { i64::try_from(len).unwrap_or(i64::MAX) + at } else { at };
                        match usize::try_from(index).ok().filter(|&i| i < len && !messages.contains(&i)) {
                            Some(i) => {
                                messages.push(i);
                                true
                            }
                            None => false,
                        }
                    }
                    _ => false,
                };
                used += usize::from(placed);
            }
            messages.sort_unstable();
            (tools, system, messages)
        }
    }
}

#[cfg(all(test, feature = "anthropic"))]
mod tests {
    use super::*;

    fn roles(pattern: &str) -> impl Iterator<Item = bool> + Clone + '_ {
        pattern.chars().map(|c| c == 'u')
    }

    #[test]
    fn auto_marks_the_newest_message_and_the_user_message_before_it() {
        let auto = PromptCache::Auto;
        assert_eq!(breakpoints(&auto, true, true, roles("u")), (true, true, vec![0]));
        assert_eq!(breakpoints(&auto, false, true, roles("uau")), (false, true, vec![0, 2]));
        assert_eq!(breakpoints(&auto, true, false, roles("uauau")), (true, false, vec![2, 4]));
        assert_eq!(breakpoints(&auto, true, true, roles("")), (true, true, vec![]));
        assert_eq!(breakpoints(&PromptCache::Off, true, true, roles("uau")), (false, false, vec![]));
    }

    #[test]
    fn breakpoints_by_hand_are_placed_where_they_point_at_most_four() {
        use CacheBreakpoint::{Message, System, Tools};
        let at = |points: Vec<CacheBreakpoint>| PromptCache::At(points);
        assert_eq!(breakpoints(&at(vec![System, Message(-1)]), true, true, roles("uau")), (false, true, vec![2]));
        assert_eq!(breakpoints(&at(vec![System, Tools]), true, false, roles("u")), (true, false, vec![]));
        assert_eq!(breakpoints(&at(vec![Message(5), Message(-9)]), true, true, roles("uau")), (false, false, vec![]));
        let many = at(vec![Tools, System, Message(0), Message(1), Message(2)]);
        assert_eq!(breakpoints(&many, true, true, roles("uau")), (true, true, vec![0, 1]));
    }
}
