-- Argo CD health of a kubepool.dev/MLJob, from status.phase (written by the kubepool operator).
-- A finished job stays in its final phase, so a synced app with a DONE job stays Healthy.
local hs = {}
local phases = {
  PENDING = "Progressing",   -- queued for pool capacity or waiting for minInstances
  RUNNING = "Progressing",
  DONE = "Healthy",
  FAILED = "Degraded",
  CANCELLED = "Suspended",   -- spec.cancel: stopped for good
}
if obj.status == nil or obj.status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the kubepool operator to admit the job"
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the kubepool operator to observe generation " .. generation .. " (status is of " .. observed .. ")"
  return hs
end
local phase = obj.status.phase
hs.status = phases[phase] or "Unknown"
if phase == "PENDING" and obj.status.reason == "Suspended" then
  hs.status = "Suspended"    -- spec.suspend (or a queue manager holding it), as Argo CD shows a suspended Job
end
local message = phase
if obj.status.ready ~= nil then
  message = message .. " (" .. obj.status.ready .. " instances ready)"
end
if obj.status.reason ~= nil then
  message = message .. ": " .. obj.status.reason
end
if obj.status.message ~= nil and obj.status.message ~= "" then
  message = message .. " - " .. obj.status.message
end
hs.message = message
return hs
