/* Shows <time data-dsched-local datetime="..."> elements in the viewer's own time zone. */
"use strict";
(function () {
    function pad(n) { return String(n).padStart(2, "0"); }
    function zoneName(date) {
        try {
            const parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" })
                .formatToParts(date);
            const zone = parts.find(function (p) { return p.type === "timeZoneName"; });
            return zone ? zone.value : "";
        } catch (e) {
            return "";
        }
    }
    function localize(root) {
        root.querySelectorAll("time[data-dsched-local]").forEach(function (node) {
            const date = new Date(node.getAttribute("datetime"));
            if (isNaN(date.getTime())) { return; }
            const day = document.createElement("span");
            day.className = "dsched-date";
            day.textContent = date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" +
                pad(date.getDate());
            const time = document.createElement("span");
            time.className = "dsched-time";
            time.textContent = pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" +
                pad(date.getSeconds()) + " " + zoneName(date);
            node.replaceChildren(day, " ", time);
            node.removeAttribute("data-dsched-local");
        });
    }
    if (document.readyState === "loading") {
        document.addEventListener("DOMContentLoaded", function () { localize(document); });
    } else {
        localize(document);
    }
})();
