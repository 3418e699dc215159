// A Node participant for tests/token_interop.rs: takes the same key as the Rust side with node
// `redlock` (4.x, one server) or `redis-semaphore`'s Mutex, on ioredis, and reports what it did.
//
//   node token_participant.js URL KEY LOG CLIENT MODE SECONDS TTL_MS
//
// CLIENT is `redlock` (its resource is KEY) or `mutex` (redis-semaphore keys its mutex
// `mutex:` + the name it is given: pass KEY with that prefix, it is taken off here).
// MODE, as the Python participant's:
//   contend  for SECONDS: take the lock, append `enter SIDE PID TOKEN` / `leave SIDE PID TOKEN`
//            to LOG (checking before each that the key still holds the token, else `stolen`),
//            release; prints `acquired N`.
//   hold     take the lock, print `HELD TOKEN`, keep it alive (redlock: extend every TTL/4; the
//            mutex refreshes itself), never release: the test kills this process.
//   late     take the lock with no renewal, print `HELD TOKEN`, wait for a line on stdin (the
//            lease has run out and another client holds the key by then), release: prints
//            `NOTOWNED` when the client reports that nothing was released, `RELEASED` otherwise.
'use strict';

const fs = require('fs');
const Redis = require('ioredis');
const Redlock = require('redlock');
const { Mutex } = require('redis-semaphore');

const [url, key, log, client, mode, secondsArg, ttlArg] = process.argv.slice(2);
const seconds = Number(secondsArg);
const ttl = Number(ttlArg);
const side = client === 'redlock' ? 'redlock' : 'mutex';

function append(line) {
  // One write on an O_APPEND descriptor: lines of all participants never interleave.
  fs.appendFileSync(log, line + '\n');
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function mutexName() {
  if (!key.startsWith('mutex:')) {
    throw new Error(`the mutex key must start with "mutex:" (redis-semaphore adds it): ${key}`);
  }
  return key.slice('mutex:'.length);
}

// One client of either kind: acquire() → token or null, release() → true (released) / false.
function locker(redis, renew) {
  if (client === 'redlock') {
    const redlock = new Redlock([redis], { retryCount: 200, retryDelay: 5, retryJitter: 3 });
    let lock = null;
    return {
      async acquire() {
        try {
          lock = await redlock.lock(key, ttl);
          return lock.value;
        } catch (e) {
          return null;
        }
      },
      async extend() {
        lock = await lock.extend(ttl);
      },
      async release() {
        try {
          await lock.unlock();
          return true;
        } catch (e) {
          return false;
        }
      },
    };
  }
  let mutex = null;
  return {
    async acquire() {
      mutex = new Mutex(redis, mutexName(), {
        lockTimeout: ttl,
        acquireTimeout: 1000,
        retryInterval: 5,
        refreshInterval: renew ? Math.round(ttl / 4) : 0,
        onLockLost: (e) => append(`lost ${side} ${process.pid} ${e.message}`),
      });
      return (await mutex.tryAcquire()) ? mutex.identifier : null;
    },
    async extend() {},
    async release() {
      // redis-semaphore's release reports nothing: whether the token was still there is read
      // just before (a release never deletes another token either way).
      const held = await redis.get(key);
      await mutex.release();
      return held === mutex.identifier;
    },
  };
}

async function main() {
  const redis = new Redis(url, { maxRetriesPerRequest: 3 });
  const pid = process.pid;
  if (mode === 'contend') {
    const lock = locker(redis, true);
    let acquired = 0;
    const end = Date.now() + seconds * 1000;
    while (Date.now() < end) {
      const token = await lock.acquire();
      if (token === null) continue;
      for (const step of ['enter', 'leave']) {
        const held = await redis.get(key);
        append(held === token ? `${step} ${side} ${pid} ${token}` : `stolen ${side} ${pid} ${token} ${held}`);
        if (step === 'enter') await sleep(2 + Math.random() * 8);
      }
      if (await lock.release()) {
        acquired += 1;
      } else {
        append(`notowned ${side} ${pid} ${token}`);
      }
      await sleep(Math.random() * 10);
    }
    console.log(`acquired ${acquired}`);
  } else if (mode === 'hold') {
    const lock = locker(redis, true);
    let token = null;
    while (token === null) token = await lock.acquire();
    console.log(`HELD ${token}`);
    for (;;) {
      await sleep(ttl / 4);
      await lock.extend();
    }
  } else if (mode === 'late') {
    const lock = locker(redis, false);
    let token = null;
    while (token === null) token = await lock.acquire();
    console.log(`HELD ${token}`);
    await new Promise((resolve) => process.stdin.once('data', resolve));
    console.log((await lock.release()) ? 'RELEASED' : 'NOTOWNED');
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
  redis.disconnect();
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
