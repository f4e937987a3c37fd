-- Actions Argo CD offers on an MLJob that has not finished: cancel it for good, or suspend it (its pods are
-- removed and its capacity released, as a Job's) and resume it (it queues again and runs from scratch).
local actions = {}
local phase = obj.status ~= nil and obj.status.phase or nil
local finished = phase == "DONE" or phase == "FAILED" or phase == "CANCELLED"
local cancelled = obj.spec ~= nil and obj.spec.cancel == true
local suspended = obj.spec ~= nil and obj.spec.suspend == true
actions["cancel"] = {["disabled"] = finished or cancelled}
actions["suspend"] = {["disabled"] = finished or cancelled or suspended}
actions["resume"] = {["disabled"] = finished or cancelled or not suspended}
return actions
