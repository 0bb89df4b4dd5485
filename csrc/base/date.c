#include "base/date.h"

#include <stdio.h>

static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

/* One cache per process: a worker is single-threaded on its loop. */
static time_t cached_second = -1;
static char cached_header[48];
static size_t cached_len;

ps_slice_t ps_date_header(time_t now)
{
    if (now != cached_second) {
        struct tm tm;
        gmtime_r(&now, &tm);
        int n =
            snprintf(cached_header, sizeof(cached_header),
                     "Date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n", days[tm.tm_wday], tm.tm_mday,
                     months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
        cached_len = n > 0 ? (size_t)n : 0;
        cached_second = now;
    }
    return (ps_slice_t){cached_header, cached_len};
}
