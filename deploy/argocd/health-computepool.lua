-- Argo CD health of a kubepool.dev/ComputePool, from status.phase and status.conditions.
-- A Degraded=True or Ready=False condition wins over the phase: an ACTIVE pool can still be unhealthy.
local hs = {}
if obj.status == nil or obj.status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the kubepool operator to report the pool"
  return hs
end
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if (c.type == "Degraded" and c.status == "True") or (c.type == "Ready" and c.status == "False") then
      hs.status = "Degraded"
      hs.message = c.type .. ": " .. (c.reason or "") .. (c.message and c.message ~= "" and (" - " .. c.message) or "")
      return hs
    end
  end
end
local phase = obj.status.phase
if phase == "ACTIVE" or phase == "IDLE" then
  hs.status = "Healthy"
elseif phase == "SUSPENDED" then
  hs.status = "Suspended"
else
  hs.status = "Unknown"
end
hs.message = phase .. ": " .. (obj.status.readyNodes or 0) .. " ready nodes, "
  .. (obj.status.instancesInUse or 0) .. " instances in use, " .. (obj.status.queuedJobs or 0) .. " jobs queued"
return hs
