/* Unit tests of csrc/base/date.c: the Date header, formatted once a second. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "base/date.h"

static const char *const day_names[7] = {"Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"};
static const char *const month_names[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

/* The expected header computed without gmtime: days since the epoch to a
 * civil date (H. Hinnant's algorithm), so the test does not share the code
 * under test's assumptions. */
static int expected_header(int64_t t, char *out, size_t cap)
{
    int64_t days = t >= 0 ? t / 86400 : (t - 86399) / 86400;
    int64_t secs = t - days * 86400;
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t d = doy - (153 * mp + 2) / 5 + 1;
    int64_t m = mp < 10 ? mp + 3 : mp - 9;
    int64_t y = yoe + era * 400 + (m <= 2);
    int wday = (int)(((days % 7) + 7) % 7);
    return snprintf(out, cap, "Date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n", day_names[wday],
                    (int)d, month_names[m - 1], (int)y, (int)(secs / 3600), (int)(secs / 60 % 60),
                    (int)(secs % 60));
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int one_of(const char *p, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(p, names[i], 3) == 0)
            return 1;
    return 0;
}

/* "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n", checked field by field. */
static int is_imf_fixdate_header(ps_slice_t s)
{
    static const char shape[] = "Date: www, dd mmm yyyy hh:mm:ss GMT\r\n";
    const char *p = s.base;
    if (s.len != sizeof(shape) - 1)
        return 0;
    for (size_t i = 0; i < s.len; i++) {
        char want = shape[i];
        if (want == 'd' || want == 'y' || want == 'h' || want == 'm' || want == 's') {
            if (want == 'm' && i >= 14 && i <= 16)
                continue; /* month name, checked below */
            if (!is_digit(p[i]))
                return 0;
        } else if (want == 'w') {
            continue;
        } else if (p[i] != want) {
            return 0;
        }
    }
    int day = (p[11] - '0') * 10 + (p[12] - '0');
    int hour = (p[23] - '0') * 10 + (p[24] - '0');
    int min = (p[26] - '0') * 10 + (p[27] - '0');
    int sec = (p[29] - '0') * 10 + (p[30] - '0');
    return one_of(p + 6, day_names, 7) && one_of(p + 14, month_names, 12) && day >= 1 &&
           day <= 31 && hour <= 23 && min <= 59 && sec <= 60;
}

static void test_epoch_is_formatted_exactly(void)
{
    ps_slice_t s = ps_date_header(0);
    CHECK_SLICE_EQ(s, "Date: Thu, 01 Jan 1970 00:00:00 GMT\r\n");
}

static void test_known_times_are_formatted_exactly(void)
{
    CHECK_SLICE_EQ(ps_date_header(784111777), "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
    CHECK_SLICE_EQ(ps_date_header(951782400), "Date: Tue, 29 Feb 2000 00:00:00 GMT\r\n");
    CHECK_SLICE_EQ(ps_date_header(1700000000), "Date: Tue, 14 Nov 2023 22:13:20 GMT\r\n");
    CHECK_SLICE_EQ(ps_date_header(2147483647), "Date: Tue, 19 Jan 2038 03:14:07 GMT\r\n");
    CHECK_SLICE_EQ(ps_date_header(4102444799), "Date: Thu, 31 Dec 2099 23:59:59 GMT\r\n");
    CHECK_SLICE_EQ(ps_date_header(4107542400), "Date: Mon, 01 Mar 2100 00:00:00 GMT\r\n");
}

/* Every few days and hours from 1970 to 2200: the right shape and the
 * same text as an independent calendar computation. */
static void test_dates_match_an_independent_calendar(void)
{
    int shape_bad = 0, text_bad = 0, checked = 0;
    for (int64_t t = 0; t < 7258118400LL; t += 86400 * 3 + 3671) {
        char want[64];
        int n = expected_header(t, want, sizeof(want));
        ps_slice_t s = ps_date_header((time_t)t);
        if (!is_imf_fixdate_header(s))
            shape_bad++;
        if (s.len != (size_t)n || memcmp(s.base, want, s.len) != 0) {
            if (text_bad++ < 3)
                fprintf(stderr, "t=%lld: got \"%.*s\", expected \"%.*s\"\n", (long long)t,
                        (int)s.len - 2, s.base, n - 2, want);
        }
        checked++;
    }
    CHECK(checked > 20000);
    CHECK_EQ(shape_bad, 0);
    CHECK_EQ(text_bad, 0);
}

static void test_same_second_returns_the_cached_text(void)
{
    ps_slice_t a = ps_date_header(1000000000);
    ps_slice_t b = ps_date_header(1000000000);
    CHECK(a.base == b.base);
    CHECK_EQ(a.len, b.len);
    CHECK_SLICE_EQ(b, "Date: Sun, 09 Sep 2001 01:46:40 GMT\r\n");
}

static void test_a_new_second_reformats(void)
{
    ps_slice_t a = ps_date_header(1000000000);
    CHECK_SLICE_EQ(a, "Date: Sun, 09 Sep 2001 01:46:40 GMT\r\n");
    ps_slice_t b = ps_date_header(1000000001);
    CHECK_SLICE_EQ(b, "Date: Sun, 09 Sep 2001 01:46:41 GMT\r\n");
    /* Going back (a clock step) is a different second too. */
    ps_slice_t c = ps_date_header(1000000000);
    CHECK_SLICE_EQ(c, "Date: Sun, 09 Sep 2001 01:46:40 GMT\r\n");
}

int main(void)
{
    test_epoch_is_formatted_exactly();
    test_known_times_are_formatted_exactly();
    test_dates_match_an_independent_calendar();
    test_same_second_returns_the_cached_text();
    test_a_new_second_reformats();
    return check_finish("test_date");
}
