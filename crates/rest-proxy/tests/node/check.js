// The official Upstash clients against tollgate-rest-proxy: run by tests/interop.rs,
// which starts the proxy and a private redis-server and reads the one JSON line printed.
// Env: UPSTASH_REDIS_REST_URL, UPSTASH_REDIS_REST_TOKEN, KEY_PREFIX.
const crypto = require('node:crypto');
const { Redis } = require('@upstash/redis');
const { Ratelimit, MultiRegionRatelimit } = require('@upstash/ratelimit');

const url = process.env.UPSTASH_REDIS_REST_URL;
const token = process.env.UPSTASH_REDIS_REST_TOKEN;
const prefix = process.env.KEY_PREFIX || 'interop';
const k = (name) => `${prefix}:${name}`;
const sha1 = (text) => crypto.createHash('sha1').update(text).digest('hex');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// { value } or { error } of an async call.
async function caught(call) {
  try {
    return { value: await call() };
  } catch (e) {
    return { error: String((e && e.message) || e) };
  }
}

async function main() {
  const out = {};
  // Base64 responses are the client's default (Upstash-Encoding: base64).
  const redis = new Redis({ url, token, enableTelemetry: false });
  const plain = new Redis({ url, token, enableTelemetry: false, responseEncoding: false });

  out.set = await redis.set(k('s'), 'héllo wörld ✓');
  out.get = await redis.get(k('s'));
  out.getPlain = await plain.get(k('s'));
  out.incr = [await redis.incr(k('n')), await redis.incr(k('n'))];
  await redis.set(k('j'), { a: 1, b: [1, 2] });
  out.json = await redis.get(k('j'));

  const p = redis.pipeline();
  p.set(k('p'), 'v');
  p.incr(k('pc'));
  p.get(k('p'));
  p.rpush(k('l'), 'a', 'b');
  p.lrange(k('l'), 0, -1);
  out.pipeline = await p.exec();

  const m = redis.multi();
  m.incr(k('t'));
  m.incrby(k('t'), 4);
  m.get(k('t'));
  out.multi = await m.exec();

  out.eval = await redis.eval('return {KEYS[1], ARGV[1], 7}', [k('e')], ['arg']);

  // A script Redis has never seen: EVALSHA first answers NOSCRIPT, EVAL then loads it.
  const fresh = `return 'fresh ${prefix}'`;
  const first = await caught(() => redis.evalsha(sha1(fresh), [], []));
  out.evalshaFresh = first.error && first.error.includes('NOSCRIPT') ? 'NOSCRIPT' : first;
  out.evalFallback = await redis.eval(fresh, [], []);
  out.evalshaAfterEval = await redis.evalsha(sha1(fresh), [], []);

  // allow-key-locking, directly: SCRIPT LOAD answers the original's sha, EVALSHA of it runs.
  const locking = `#!lua flags=allow-key-locking\nreturn redis.call('INCR', KEYS[1]) -- ${prefix}`;
  out.scriptLoadSha = await caught(async () => (await redis.scriptLoad(locking)) === sha1(locking));
  out.evalshaLocking = await caught(() => redis.evalsha(sha1(locking), [k('lock')], []));

  const bad = new Redis({ url, token: token + 'x', enableTelemetry: false, retry: false });
  const wrong = await caught(() => bad.get(k('s')));
  out.wrongToken = wrong.error || 'no error';

  // @upstash/ratelimit 2.x: its scripts carry allow-key-locking. Ten calls fit in one
  // 10 s window, the eleventh is refused; keep clear of a window's end.
  const windowMs = 10000;
  const into = Date.now() % windowMs;
  if (into > windowMs - 2000) await sleep(windowMs - into + 50);
  const limiter = new Ratelimit({
    redis,
    limiter: Ratelimit.fixedWindow(10, '10 s'),
    prefix: k('rl'),
    ephemeralCache: false,
    analytics: false,
  });
  out.ratelimit = await caught(async () => {
    const verdicts = [];
    for (let i = 0; i < 11; i++) {
      const r = await limiter.limit('caller');
      verdicts.push([r.success, r.remaining]);
    }
    return verdicts;
  });

  // The other algorithms: successes only (their `remaining` is each
  // algorithm's own estimate). Ten fit, the eleventh is refused.
  const successes = async (limiter) => {
    const seen = [];
    for (let i = 0; i < 11; i++) {
      const r = await limiter.limit('caller');
      if (r.pending) await r.pending;
      seen.push(r.success);
    }
    return seen;
  };
  const common = { redis, ephemeralCache: false, analytics: false };
  out.slidingWindow = await caught(() =>
    successes(new Ratelimit({ ...common, limiter: Ratelimit.slidingWindow(10, '10 s'), prefix: k('sw') })));
  out.tokenBucket = await caught(() =>
    successes(new Ratelimit({ ...common, limiter: Ratelimit.tokenBucket(1, '10 s', 10), prefix: k('tb') })));
  out.multiRegion = await caught(() =>
    successes(new MultiRegionRatelimit({
      redis: [redis],
      limiter: MultiRegionRatelimit.fixedWindow(10, '10 s'),
      prefix: k('mr'),
      ephemeralCache: false,
      analytics: false,
    })));

  // Closed by default: the same token cannot administer the server, not
  // even from a script.
  out.flushall = await caught(() => redis.flushall());
  out.evalFlushall = await caught(() => redis.eval("return redis.call('FLUSHALL')", [], []));
  out.survived = await redis.get(k('s'));

  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.log(JSON.stringify({ fatal: String((e && e.stack) || e) }));
  process.exit(1);
});
