//! The README's example: an Ask AI call guarded by three call limits and a
//! token budget, reserved all-or-nothing and fail-closed, then settled with
//! the tokens the provider call used.
//!
//! `cargo run -p tollgate --features sqlite --example ask -- [STORE_URL]`
//! (default `sqlite:ask-example.sqlite3`).

use tollgate::{Error, Limiter, RuleSet, Visitor};

async fn ask(
    limiter: &Limiter,
    rules: &RuleSet,
    project: &str,
    address: &str,
) -> Result<String, Error> {
    let visitor = Visitor::parse(address)?; // any address of one IPv6 /64 is one visitor
    let estimate = 1_500; // tokens, estimated from the question before any work
    let limits = [
        rules.get("ask")?.limit(&[project, visitor.as_str()])?,
        rules.get("ask-site")?.limit(&[project])?,
        rules.get("ask-all")?.limit::<&str>(&[])?,
        rules
            .get("ask-tokens")?
            .limit(&[project])?
            .with_cost(estimate)?,
    ];
    // Fail-closed (a store failure is Error::Unavailable) and all-or-nothing:
    // a refused call spends no shared budget.
    let verdict = limiter.reserve(&limits).await?;
    if let Some(limited) = verdict.limited() {
        return Ok(format!(
            "`{}` is full; retry in {} s",
            limited.limit(),
            limited.retry_after()
        ));
    }
    let used = 1_100; // call the AI provider here; it reports the tokens it used
    limiter.settle(&verdict, "ask-tokens", used).await?; // 400 tokens back
    Ok(format!("answered with {used} tokens"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sqlite:ask-example.sqlite3".into());
    let limiter = Limiter::new(tollgate::open_store(&url)?);
    let rules = RuleSet::defaults();
    for _ in 0..16 {
        println!(
            "{}",
            ask(&limiter, &rules, "docs", "2001:db8:0:1::7").await?
        );
    }
    Ok(())
}
