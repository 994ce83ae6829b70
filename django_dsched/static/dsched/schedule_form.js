/* The schedule form shows the timing fields of the chosen kind only (rows with errors stay),
   and its "Today" and "Now" give the date and time on the wall clock of the schedule's time
   zone, which start and end are read on (not the server's, as the admin's shortcuts do). */
"use strict";
(function () {
    const rows = {
        INTERVAL: ".field-frequency_time",
        CRON: ".field-cron_expression",
        RRULE: ".field-rrule",
    };
    function update(kind) {
        Object.keys(rows).forEach(function (name) {
            document.querySelectorAll(".form-row" + rows[name]).forEach(function (row) {
                row.hidden = name !== kind && !row.classList.contains("errors") &&
                    !row.querySelector(".errorlist");
            });
        });
    }
    // Seconds east of UTC of ``zone`` now (throws on a name the browser does not know).
    function offset(zone) {
        const now = new Date();
        now.setMilliseconds(0);
        const parts = {};
        new Intl.DateTimeFormat("en-US", {
            timeZone: zone, hourCycle: "h23", year: "numeric", month: "2-digit",
            day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit"
        }).formatToParts(now).forEach(function (part) { parts[part.type] = part.value; });
        const wall = Date.UTC(+parts.year, +parts.month - 1, +parts.day, +parts.hour,
            +parts.minute, +parts.second);
        return Math.round((wall - now.getTime()) / 1000);
    }
    // The admin's shortcuts read the "server" offset from the body: make it the zone's.
    function follow(zone) {
        try {
            document.body.dataset.adminUtcOffset = String(offset(zone || "UTC"));
        } catch (error) {
            // Not a zone (yet): the form says so when saved; keep the last one.
        }
    }
    function start() {
        const select = document.getElementById("id_schedule_kind");
        if (select) {
            select.addEventListener("change", function () { update(select.value); });
            update(select.value);
        }
        const zoned = document.querySelector("[data-dsched-zone]");
        if (!zoned) { return; }
        follow(zoned.dataset.dschedZone);
        const field = document.getElementById("id_time_zone");
        if (field) {
            field.addEventListener("input", function () { follow(field.value.trim()); });
        }
    }
    if (document.readyState === "loading") {
        document.addEventListener("DOMContentLoaded", start);
    } else {
        start();
    }
})();
