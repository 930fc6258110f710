import { createTestDatabase, startTestApp } from './helpers/app';
import { gql } from './helpers/client';
import { prismaExecutor } from '../jobs/registry';

describe('ROLE splits the API and the workers over one database', () => {
  it('an api process and a worker process start together; jobs sent in a transaction commit or roll back with it', async () => {
    const databaseUrl = await createTestDatabase();
    // Four processes at once: migrations, pg-boss's schema and queue creation must not race.
    const [api, worker, ...more] = await Promise.all([
      startTestApp({ databaseUrl, role: 'api' }),
      startTestApp({ databaseUrl, role: 'worker' }),
      startTestApp({ databaseUrl, role: 'worker' }),
      startTestApp({ databaseUrl, role: 'api' }),
    ]);
    try {
      expect(api.app.server).not.toBeNull();
      expect(worker.app.server).toBeNull();
      expect(worker.app.url).toBeNull();
      expect((await gql(api.url, api.adminToken, '{ viewer { platformAdmin } }')).data).toEqual({ viewer: { platformAdmin: true } });
      // The worker's admin token (another ADMIN_TOKEN) was seeded in the same database.
      expect((await gql(api.url, worker.adminToken, '{ viewer { platformAdmin } }')).data).toEqual({ viewer: { platformAdmin: true } });

      const prisma = api.app.database.prisma;
      const queues = api.app.queues;
      const before = await queues.boss.getQueueSize('metal.batch');
      await expect(
        prisma.$transaction(async (tx) => {
          await queues.send('metal.batch', { batchId: 'batch_x' }, { db: prismaExecutor(tx) });
          throw new Error('roll back');
        }),
      ).rejects.toThrow('roll back');
      expect(await queues.boss.getQueueSize('metal.batch')).toBe(before);
      const id = await prisma.$transaction((tx) => queues.send('metal.batch', { batchId: 'batch_y' }, { db: prismaExecutor(tx) }));
      // Visible to the other process through the shared database.
      const job = await worker.app.queues.boss.getJobById('metal.batch', id);
      expect(job?.data).toEqual({ batchId: 'batch_y' });
    } finally {
      await Promise.all([api.stop(), worker.stop(), ...more.map((m) => m.stop())]);
    }
  });
});
