-- Actions Argo CD offers on an MLJob: cancel one that has not finished (the operator removes its pods).
local actions = {}
local phase = obj.status ~= nil and obj.status.phase or nil
local finished = phase == "DONE" or phase == "FAILED" or phase == "CANCELLED"
local suspended = obj.spec ~= nil and obj.spec.suspend == true
actions["cancel"] = {["disabled"] = finished or suspended}
return actions
