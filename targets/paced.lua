-- wrk script: each connection waits SIDECAR_DELAY_MS milliseconds between requests,
-- so a few connections make a light, steady load instead of a saturating one.
local pause = tonumber(os.getenv("SIDECAR_DELAY_MS") or "0")

function delay()
  return pause
end
