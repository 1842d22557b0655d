//! The places of a table: `Start` first, `End` last, the others in the order the
//! transitions first name them.

use proc_macro2::Span;
use syn::Ident;
use syn::spanned::Spanned as _;

use super::{Place, RawTransition};
use crate::ctxt::Ctxt;
use crate::names::{is_upper_camel, pascal_case, snake_case};

/// The index of `Start`.
pub(super) const START: usize = 0;

/// A place a transition names, before `End` has its index (it is last, after every
/// other place is known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PlaceId {
    At(usize),
    End,
}

/// The places of a table: `Start` first, `End` last, the others in the order the
/// transitions first name them. It owns both ends, so an index is a place and
/// [`Places::index`] turns what a transition names into one.
#[derive(Clone)]
#[cfg_attr(test, derive(Debug))]
pub(crate) struct Places(Vec<Place>);

impl Places {
    /// Names the places of every transition, in order: the places and what each
    /// transition names. Errors (a place that is not UpperCamelCase, two stored under
    /// one name, one listed twice, a missing target) are recorded in `cx`.
    pub(super) fn of(cx: &mut Ctxt, raw: &[RawTransition]) -> (Self, Vec<Named>) {
        let mut naming = Naming::new();
        let named = raw.iter().map(|t| naming.transition(cx, t)).collect();
        (naming.finish(), named)
    }

    /// The index of `End`: the last.
    pub(crate) fn end(&self) -> usize {
        self.0.len() - 1
    }

    /// The index of the place a transition names.
    pub(super) fn index(&self, id: PlaceId) -> usize {
        match id {
            PlaceId::At(i) => i,
            PlaceId::End => self.end(),
        }
    }
}

impl std::ops::Deref for Places {
    type Target = [Place];
    fn deref(&self) -> &[Place] {
        &self.0
    }
}

/// The places named so far; [`Naming::finish`] adds `End`.
struct Naming {
    list: Vec<Place>,
    start_seen: bool,
    /// The first `End` written, for the place's span.
    end: Option<Ident>,
}

/// The places one transition names, as written.
pub(super) struct Named {
    pub(super) from: Vec<(PlaceId, Ident)>,
    pub(super) to: Option<PlaceId>,
}

impl Naming {
    fn new() -> Self {
        let start = Place { ident: Ident::new("Start", Span::call_site()), name: loopstack_graph::START.into() };
        Self { list: vec![start], start_seen: false, end: None }
    }

    fn transition(&mut self, cx: &mut Ctxt, t: &RawTransition) -> Named {
        let from_idents = match &t.args.from {
            Some(f) => f.clone(),
            None => vec![Ident::new("Start", t.attr.path().span())],
        };
        let mut from: Vec<(PlaceId, Ident)> = Vec::new();
        for ident in &from_idents {
            let id = self.place(cx, ident);
            if from.iter().any(|(j, _)| *j == id) {
                cx.error_spanned_by(ident, format!("place `{ident}` is listed twice"));
                continue;
            }
            from.push((id, ident.clone()));
        }
        let to = match &t.args.to {
            Some(to) => Some(self.place(cx, to)),
            None => {
                cx.error_spanned_by(&t.attr, "a transition needs a target: `#[transition(to = Place)]`");
                None
            }
        };
        Named { from, to }
    }

    /// The place `ident` names, added when it is new.
    fn place(&mut self, cx: &mut Ctxt, ident: &Ident) -> PlaceId {
        let text = ident.to_string();
        if text == "Start" {
            if !self.start_seen {
                self.list[START].ident = ident.clone();
                self.start_seen = true;
            }
            return PlaceId::At(START);
        }
        if text == "End" {
            self.end.get_or_insert_with(|| ident.clone());
            return PlaceId::End;
        }
        if let Some(i) = self.list.iter().position(|p| p.ident == *ident) {
            return PlaceId::At(i);
        }
        if !is_upper_camel(&text) {
            let suggestion = pascal_case(&text);
            cx.error_spanned_by(
                ident,
                format!("places are UpperCamelCase identifiers: write `{suggestion}` for `{text}`"),
            );
        }
        let name = snake_case(&text);
        if let Some(other) = self.list.iter().find(|p| p.name == name) {
            cx.error_spanned_by(
                ident,
                format!("places `{}` and `{text}` would both be stored as `{name}`", other.ident),
            );
        }
        self.list.push(Place { ident: ident.clone(), name });
        PlaceId::At(self.list.len() - 1)
    }

    /// Every place, `End` last.
    fn finish(mut self) -> Places {
        let ident = self.end.take().unwrap_or_else(|| Ident::new("End", Span::call_site()));
        self.list.push(Place { ident, name: loopstack_graph::END.into() });
        Places(self.list)
    }
}
