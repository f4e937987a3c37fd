-- Argo CD health of a kubepool.dev/ComputePool, from status.phase and status.conditions.
-- Missing nodes are Degraded only while the pool has work (jobs running or queued): a pool with nothing to do
-- may have no nodes at all (a node autoscaler took them), and an auto-suspended pool is resting, not broken.
local hs = {}
if obj.status == nil or obj.status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the kubepool operator to report the pool"
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the kubepool operator to observe generation " .. generation .. " (status is of " .. observed .. ")"
  return hs
end
local st = obj.status
local busy = (st.instancesInUse or 0) > 0 or (st.queuedJobs or 0) > 0
local suspendedBy = nil
if st.conditions ~= nil then
  for _, c in ipairs(st.conditions) do
    if (c.type == "Degraded" and c.status == "True") or (c.type == "Ready" and c.status == "False" and busy) then
      hs.status = "Degraded"
      hs.message = c.type .. ": " .. (c.reason or "") .. (c.message and c.message ~= "" and (" - " .. c.message) or "")
      return hs
    end
    if c.type == "Suspended" and c.status == "True" then
      suspendedBy = c.reason
    end
  end
end
local phase = st.phase
if phase == "ACTIVE" or phase == "IDLE" then
  hs.status = "Healthy"
elseif phase == "SUSPENDED" and suspendedBy == "AutoSuspended" then
  hs.status = "Healthy"     -- idle past autoSuspendSeconds; the next job resumes it
elseif phase == "SUSPENDED" then
  hs.status = "Suspended"   -- spec.suspend: an admin paused it
else
  hs.status = "Unknown"
end
hs.message = phase .. (suspendedBy and (" (" .. suspendedBy .. ")") or "") .. ": " .. (st.readyNodes or 0) .. " ready nodes, "
  .. (st.instancesInUse or 0) .. " instances in use, " .. (st.queuedJobs or 0) .. " jobs queued"
return hs
