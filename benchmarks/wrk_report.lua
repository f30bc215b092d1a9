-- wrk script of the benchmarks (one wrk thread): an optional fixed request rate, and one line
-- "BENCH {json}" at the end with the request count, errors and latency percentiles in µs.
--
-- BENCH_RATE=R (requests per second, all connections together): every request claims the next
-- slot of one schedule spaced 1/R apart, and its connection waits until that slot. A connection
-- that falls behind sends at once, so the schedule catches up and the rate holds as long as
-- the connections suffice. Without BENCH_RATE (or 0), every connection sends back to back.
local rate = tonumber(os.getenv("BENCH_RATE") or "0") or 0

if rate > 0 then
  local ffi = require("ffi")
  ffi.cdef([[
    typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
    int clock_gettime(int clock, bench_timespec *out);
  ]])
  local now_buffer = ffi.new("bench_timespec")
  local function now_ms()
    ffi.C.clock_gettime(1, now_buffer) -- CLOCK_MONOTONIC
    return tonumber(now_buffer.tv_sec) * 1000 + tonumber(now_buffer.tv_nsec) / 1e6
  end
  local interval = 1000 / rate
  local next_slot = nil

  function delay()
    local now = now_ms()
    if next_slot == nil then
      next_slot = now
    end
    local slot = next_slot
    next_slot = next_slot + interval
    if slot <= now then
      return 0
    end
    return slot - now
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests": %d, "duration_us": %d, "socket_errors": %d, "status_errors": %d, '
      .. '"timeouts": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "p999_us": %d, '
      .. '"mean_us": %.1f, "max_us": %d}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.mean, latency.max
  ))
end
