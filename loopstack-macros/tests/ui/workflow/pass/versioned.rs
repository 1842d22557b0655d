use loopstack::{Result, RunContext, Workflow, workflow};

mod v1 {
    use loopstack::{Result, RunContext, workflow};

    #[derive(Default, serde::Serialize, serde::Deserialize)]
    pub struct Draft {
        pub text: String,
    }

    pub struct Publishing;

    #[workflow(name = "publishing")]
    impl Publishing {
        #[transition(to = Drafted)]
        async fn draft(&self, _state: &mut Draft, _cx: &mut RunContext) -> Result<()> {
            Ok(())
        }

        #[transition(from = Drafted, to = End, wait)]
        async fn publish(&self, _state: &mut Draft, _cx: &mut RunContext) -> Result<()> {
            Ok(())
        }
    }
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Article {
    text: String,
    reviewed: bool,
}

struct Publishing;

#[workflow(name = "publishing", version = 3)]
impl Publishing {
    #[transition(to = Written)]
    async fn write(&self, _state: &mut Article, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Written, to = End, wait)]
    async fn publish(&self, _state: &mut Article, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    // With the old place as the old build's enum, infallible.
    #[migrate(from = 1)]
    fn upgrade_v1(&self, old: v1::Draft, place: v1::PublishingPlace) -> (Article, PublishingPlace) {
        let place = match place {
            v1::PublishingPlace::Start => PublishingPlace::Start,
            v1::PublishingPlace::Drafted => PublishingPlace::Written,
            v1::PublishingPlace::End => PublishingPlace::End,
        };
        (Article { text: old.text, reviewed: false }, place)
    }

    // Without `&self`, the place as its name, fallible.
    #[migrate(from = 2)]
    fn from_v2(old: Article, place: String) -> std::result::Result<(Article, PublishingPlace), String> {
        match place.as_str() {
            "written" => Ok((old, PublishingPlace::Written)),
            other => Err(format!("no place {other} in version 3")),
        }
    }
}

fn main() {
    let def = Publishing.definition();
    assert_eq!((def.version(), def.migrates_from()), (3, &[1, 2][..]));
    let (state, place) = Publishing.migrate(1, "drafted", r#"{"text": "hi"}"#).unwrap();
    assert_eq!((state.text.as_str(), state.reviewed, place), ("hi", false, "written"));
    let err = Publishing.migrate(2, "start", r#"{"text": "", "reviewed": true}"#).unwrap_err();
    assert_eq!(err.to_string(), "no place start in version 3");
    assert!(Publishing.migrate(1, "gone", r#"{"text": ""}"#).unwrap_err().to_string().contains("`gone`"));
    assert_eq!(Publishing.migrate(4, "start", "{}").unwrap_err().to_string(), "version 4 has no migration");
    assert_eq!(v1::Publishing.definition().version(), 1);
}
